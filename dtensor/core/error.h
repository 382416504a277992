// Typed errors for user-facing problems and DT_CHECK for broken invariants.
//
// A user-facing problem (bad shape, bad IR, bad plan, bad file) throws a dt::Error subclass whose
// message is a lowercase fact with the offending values: "shard dim 3 out of range for tensor of
// rank 2". A broken internal invariant uses DT_CHECK(cond) << values, which throws
// dt::InternalError with file:line in the message.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Shapes that do not agree (broadcasting, matmul inner dims, view sizes).
class ShapeError : public Error { using Error::Error; };
// A dim index outside [-rank, rank).
class DimError : public Error { using Error::Error; };
// A dtype the kernel or conversion does not support.
class DTypeError : public Error { using Error::Error; };
// A bad argument value (negative size, bad placement text, bad option).
class ValueError : public Error { using Error::Error; };
// Text input that does not parse or verify. Located errors (text input, or a node with a source
// location) carry the file, line and column (from 1) as fields, and what() starts with
// "file:line:col: "; others (a graph built in code) have line 0 and a message naming graph and node.
class ParseError : public Error {
 public:
  explicit ParseError(const std::string& message) : Error(message), message_(message) {}
  ParseError(std::string file, int line, int column, const std::string& message)
      : Error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
        file_(std::move(file)), line_(line), column_(column), message_(message) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 0: not located in a text
  int column() const { return column_; }
  const std::string& message() const { return message_; }  // what() without the location

 private:
  std::string file_;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};
// A file that cannot be read or is malformed.
class IoError : public Error { using Error::Error; };
// A collective that cannot complete: the message names the collective, its sequence number and the
// ranks; a failure of one issued collective also carries them as fields.
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : Error(what) {}
  CommError(const std::string& what, int64_t sequence, std::vector<int> ranks)
      : Error(what), sequence_(sequence), ranks_(std::move(ranks)) {}
  int64_t sequence() const { return sequence_; }  // of the collective on its group; -1: not one collective
  const std::vector<int>& ranks() const { return ranks_; }  // global ranks of its group (or the pair)

 private:
  int64_t sequence_ = -1;
  std::vector<int> ranks_;
};
// A broken internal invariant: a bug in dtensor, not in the input. Deliberately not a dt::Error, so
// that no handler of user errors (a cost search treating a refused move as infinite, the CLI's
// exit code 2) can swallow it: the CLI reports it with exit code 3.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

namespace detail {
// Collects a message with operator<<.
class Message {
 public:
  explicit Message(const char* prefix) { os_ << prefix; }
  template <typename V>
  Message& operator<<(const V& v) {
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

// `Raise<T>() & (Message(...) << a << b)` throws T with the message. operator& binds more loosely
// than operator<<, so the whole message is built first, and being [[noreturn]] it tells the
// compiler that a DT_THROW statement does not return (no "missing return" after it). The throw
// happens in an ordinary function, never in a destructor.
template <typename T>
struct Raise {};
template <typename T>
[[noreturn]] void operator&(Raise<T>, const Message& m) {
  throw T(m.str());
}

// Where a ParseError is: `ParseAt{...} & (Message("") << a << b)` throws it, [[noreturn]] like
// DT_THROW (the parser's and the verifier's fail(...) return one; DT_PARSE_FAIL spells the rest).
// line 0: not in a text; `context` then prefixes the message ("graph g, node 3 (relu): ").
struct ParseAt {
  std::string file;
  int line = 0;
  int column = 0;
  std::string context;
};
[[noreturn]] inline void operator&(const ParseAt& at, const Message& m) {
  if (at.line > 0) throw ParseError(at.file, at.line, at.column, m.str());
  throw ParseError(at.context + m.str());
}
}  // namespace detail

}  // namespace dt

#define DT_STRINGIFY_INNER(x) #x
#define DT_STRINGIFY(x) DT_STRINGIFY_INNER(x)

// DT_CHECK(cond) << "values" throws dt::InternalError("file:line: check failed: cond values").
#define DT_CHECK(cond)                                                                   \
  if (cond) {                                                                            \
  } else                                                                                 \
    ::dt::detail::Raise<::dt::InternalError>() &                                         \
        ::dt::detail::Message(__FILE__ ":" DT_STRINGIFY(__LINE__) ": check failed: " #cond " ")

// DT_THROW(ShapeError) << "values" throws the given dt::Error subclass with the message.
#define DT_THROW(Type) ::dt::detail::Raise<::dt::Type>() & ::dt::detail::Message("")

// DT_PARSE_FAIL(where) << "values" throws a ParseError at `where` (a detail::ParseAt).
#define DT_PARSE_FAIL(where) (where) & ::dt::detail::Message("")
