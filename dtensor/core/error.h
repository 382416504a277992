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

// Every user error may say where in a text the problem is: a file, line and column (from 1) as
// fields, and what() then starts with "file:line:col: ". message() is what() without that prefix.
// A problem found in a text is located when it is thrown (the parser), or later by whoever knows
// where it is: the verifier locates the ShapeError that an op's inference threw at the node's line
// and rethrows the same object (`throw;`), so an error keeps its type wherever it is reported.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message), what_(message) {}
  Error(std::string file, int line, int column, const std::string& message)
      : std::runtime_error(message), message_(message) {
    locate(std::move(file), line, column);
  }
  const char* what() const noexcept override { return what_.c_str(); }
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 0: not located in a text
  int column() const { return column_; }
  const std::string& message() const { return message_; }  // what() without the location
  bool located() const { return located_; }

  // Says where the problem is: in a text (line > 0: what() becomes "file:line:col: message"), or,
  // for a graph built in code (line 0), by `context` ("graph g, node 3 (relu): "), which then
  // prefixes what(). A context given with a line follows the location ("file:line:col: context
  // message": the interpreter names the node that failed). The first location given sticks: the
  // innermost code knows best.
  void locate(std::string file, int line, int column, const std::string& context = {}) {
    if (located_) return;
    located_ = true;
    if (line > 0) {
      file_ = std::move(file);
      line_ = line;
      column_ = column;
      what_ = file_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + context + message_;
    } else {
      what_ = context + message_;
    }
  }

 private:
  std::string file_;
  int line_ = 0;
  int column_ = 0;
  bool located_ = false;
  std::string message_;
  std::string what_;
};

// Shapes that do not agree (broadcasting, matmul inner dims, view sizes).
class ShapeError : public Error { using Error::Error; };
// A dim index outside [-rank, rank).
class DimError : public Error { using Error::Error; };
// A dtype the kernel or conversion does not support.
class DTypeError : public Error { using Error::Error; };
// A bad argument value (negative size, bad placement text, bad option).
class ValueError : public Error { using Error::Error; };
// Text input that does not parse, or a graph that does not verify. Located like every Error;
// unlocated ones (a graph built in code) have line 0 and a message naming graph and node.
class ParseError : public Error { using Error::Error; };
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
  ParseError e(m.str());
  e.locate(at.file, at.line, at.column, at.context);
  throw e;
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
