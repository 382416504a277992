// Typed errors for user-facing problems and DT_CHECK for broken invariants.
//
// A user-facing problem (bad shape, bad IR, bad plan, bad file) throws a dt::Error subclass whose
// message is a lowercase fact with the offending values: "shard dim 3 out of range for tensor of
// rank 2". A broken internal invariant uses DT_CHECK(cond) << values, which throws
// dt::InternalError with file:line in the message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

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
// Text input that does not parse or verify; the message starts with file:line:col.
class ParseError : public Error { using Error::Error; };
// A file that cannot be read or is malformed.
class IoError : public Error { using Error::Error; };
// A collective that cannot complete: names the collective, its sequence number and the ranks.
class CommError : public Error { using Error::Error; };
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

// Collects a message and throws T when destroyed (end of the full expression). Only for error
// builders that return the message prefix by value (the parser's and the verifier's fail(loc));
// everything else uses DT_THROW / DT_CHECK, whose throw the compiler sees as [[noreturn]].
template <typename T>
class Thrower {
 public:
  explicit Thrower(const char* prefix) { os_ << prefix; }
  Thrower(const Thrower&) = delete;
  ~Thrower() noexcept(false) { throw T(os_.str()); }
  template <typename V>
  Thrower& operator<<(const V& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};
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
