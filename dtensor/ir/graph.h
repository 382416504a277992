// The IR: a Graph is a list of Nodes in topological order (like torch.fx) over SSA Values.
//
// A Value is produced exactly once: by the graph signature (a data input or a named parameter,
// whose name is its key in the weights file, e.g. `layers.0.fc1.weight`) or as a result of a node.
// Every value carries its static type (dtype + shape). Nodes reference an op of the registry
// (op_registry.h), operand values, attributes aligned with the op's schema (defaults filled in) and
// their result values. Values and nodes live in arenas owned by the graph (stable_pool.h), so
// pointers to them stay valid while the graph is edited (insert, erase, replace uses) and while
// the graph is moved; erased nodes keep their memory until the graph is destroyed.
//
// Invariants checked by verify() (verifier.h), not by every edit: operands are defined before use,
// result types agree with the op's inference, every collective result has exactly one wait_tensor
// before its first other reader, collectives name declared groups.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/small_vector.h"
#include "dtensor/ir/attr.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/stable_pool.h"

namespace dt::ir {

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
  int64_t rank() const { return int64_t(shape.size()); }
  int64_t numel() const { return dt::numel(shape); }
  size_t nbytes() const { return size_t(numel()) * itemsize(dtype); }
};
// Returns "f32[8, 64]" (the IR spelling).
std::string type_str(const TensorType& t);

// Where a node or declaration came from in IR text (line 0 when built in code), and for a node
// made from another model's node, that node (`origin`: "ONNX node Gather '/embed_tokens/Gather'",
// printed and parsed as the statement's trailing `loc("...")`, null when none). Being part of the
// location, it goes wherever the node is copied (partitioning, passes) and a run-time error of the
// node names it.
struct SourceLoc {
  int line = 0;
  int col = 0;
  const char* origin = nullptr;  // interned (intern_origin): lives as long as the process
};
// Returns a copy of `origin` that lives as long as the process; equal strings give one pointer.
// Thread-safe.
const char* intern_origin(std::string_view origin);

struct Node;

enum class ValueKind : uint8_t { input, param, result };

// Members ordered to keep padding out (136 bytes with libstdc++, of which 64 are the shape with
// its inline dims): a parsed graph has about two values per node, and their memory is most of a
// parse's page faults.
struct Value {
  int id = 0;  // dense index into Graph::values(), stable for the graph's life
  int result_index = 0;
  std::string name;
  TensorType type;
  Node* producer = nullptr;  // set for results
  SourceLoc loc;
  ValueKind kind = ValueKind::result;
  // A param that is a constant of the model (`const` in the text, docs/ir.md): bound from the
  // weights like any param, but never trained and never sharded by a plan's wildcard pattern.
  bool frozen = false;
};

// Operand and result lists keep their first elements inline: nearly every op has at most 4
// operands (linear has 3) and 2 results, so a parsed node allocates nothing for them.
using OperandList = SmallVector<Value*, 4>;
using ResultList = SmallVector<Value*, 2>;

struct Node {
  OpKind op = OpKind::count;
  OperandList operands;
  std::vector<Attr> attrs;  // one per AttrSpec of the op's schema, in schema order
  ResultList results;
  SourceLoc loc;  // location of the op name in the text

  Value* result(int i = 0) const { return results[size_t(i)]; }
  // Typed attribute access by schema name; a wrong name or kind is a bug (DT_CHECK).
  const Attr& attr(std::string_view name) const;
  int64_t attr_int(std::string_view name) const { return std::get<int64_t>(attr(name)); }
  double attr_float(std::string_view name) const { return std::get<double>(attr(name)); }
  bool attr_bool(std::string_view name) const { return std::get<bool>(attr(name)); }
  const std::string& attr_str(std::string_view name) const { return std::get<std::string>(attr(name)); }
  DType attr_dtype(std::string_view name) const { return std::get<DType>(attr(name)); }
  const std::vector<int64_t>& attr_ints(std::string_view name) const {
    return std::get<std::vector<int64_t>>(attr(name));
  }
};

// `group tp = [0, 2, 4, 6]`: a process group of global ranks named in collectives.
struct GroupDecl {
  std::string name;
  std::vector<int> ranks;
  SourceLoc loc;
};

// Maps value names to values: open addressing with linear probing over 8-byte slots that hold
// the low 32 bits of the name's hash (the bits of the slot index, so growing needs no rehash) and
// the value's id. The keys are the values' own names, so every call takes the graph's values(),
// which the ids index. The parser does several lookups per node and touches the table all over,
// so its size matters as much as its probe count: 8-byte slots at up to 3/4 load are a quarter
// of the (hash, Value*) table at 1/2 load this replaced.
class NameTable {
 public:
  Value* find(std::string_view name, std::span<Value* const> values) const;
  // Inserts `v`, whose id indexes `values` (or is values.size(): the value about to be added).
  // Returns false (and changes nothing) when the name is already present.
  bool insert(const Value* v, std::span<Value* const> values);
  void erase(std::string_view name, std::span<Value* const> values);
  // Erases v's name when it names v (one probe, where find + erase took two).
  void erase_if_names(const Value* v, std::span<Value* const> values);
  // Erases the names of the values whose ids are marked in `dead`, in one sweep of the table: when
  // many values go at once (a pass dropping thousands of nodes), sequential reads beat a probe
  // per name, each a cache miss on a large graph.
  void erase_marked(const std::vector<bool>& dead);
  size_t slots() const { return slots_.size(); }
  void reserve(size_t n);

 private:
  struct Slot {
    uint32_t tag = 0;    // low half of the name's hash
    uint32_t entry = 0;  // kEmpty, kErased, or value id + kFirstId
  };
  static constexpr uint32_t kEmpty = 0;
  static constexpr uint32_t kErased = 1;
  static constexpr uint32_t kFirstId = 2;
  static uint64_t hash(std::string_view s);
  // Returns the slot holding `name`, or nullptr.
  const Slot* lookup(std::string_view name, std::span<Value* const> values) const;
  void grow(size_t min_slots);

  std::vector<Slot> slots_;  // size is 0 or a power of two
  size_t used_ = 0;          // live entries + erased markers
};

// The parts of a node to append, viewing the caller's storage: the parser appends from its
// scratch vectors without building per-node temporaries.
struct NodeParts {
  OpKind op = OpKind::count;
  std::span<Value* const> operands;
  std::vector<Attr> attrs;                         // complete, in schema order
  std::span<TensorType> result_types;              // moved from
  std::span<const std::string_view> result_names;  // empty, or one per result ("" for a fresh name)
  SourceLoc loc;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // The file the graph was parsed from, used in error messages ("" when built in code).
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // Signature. Names must be unique among all values (ValueError otherwise).
  Value* add_input(std::string_view name, TensorType type, SourceLoc loc = {});
  Value* add_param(std::string_view name, TensorType type, SourceLoc loc = {});
  void add_group(const std::string& name, std::vector<int> ranks, SourceLoc loc = {});

  // Appends a node whose results have the given types. Empty names get fresh numeric names
  // ("%0", "%1", ...). Attributes must be complete and in schema order (the builder and the
  // parser fill defaults).
  Node* append(OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
               std::vector<TensorType> result_types, std::vector<std::string> result_names = {},
               SourceLoc loc = {});
  // Same, from views (no temporaries needed; the result types are moved from).
  Node* append(NodeParts parts);
  // Same, inserting before position `pos` of nodes().
  Node* insert(size_t pos, OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
               std::vector<TensorType> result_types, std::vector<std::string> result_names = {});
  // Removes the node at `pos`; its results must have no remaining users (not checked here).
  void erase(size_t pos);
  // Makes every operand and output that reads `from` read `to` instead.
  void replace_all_uses(Value* from, Value* to);
  // Replaces nodes() by `order`, a permutation of a subset of the current nodes; nodes left out
  // are dropped and their results' names freed (their values stay in values(), unnamed). For
  // passes that reorder in one sweep: insert/erase are O(n) each.
  void set_node_order(const std::vector<Node*>& order);
  // Same, the new order given by positions in nodes(): what a pass that numbers the nodes already
  // has (set_node_order(order) must first hash every node to find its position).
  void set_node_order(std::span<const size_t> positions);
  // Renames value `v` (ValueError when `name` is taken by another value).
  void rename(Value* v, const std::string& name);

  void set_outputs(std::vector<Value*> outputs) { outputs_ = std::move(outputs); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& params() const { return params_; }
  const std::vector<Node*>& nodes() const { return nodes_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<GroupDecl>& groups() const { return groups_; }
  // Every value ever created, indexed by Value::id (erased nodes leave theirs unused).
  const std::vector<Value*>& values() const { return values_; }
  size_t num_values() const { return values_.size(); }

  Value* find(std::string_view name) const;
  const GroupDecl* find_group(std::string_view name) const;
  // Returns the size of group `name`, or -1 when it is not declared.
  int group_size(std::string_view name) const;
  // Reserves capacity for n nodes (the parser knows roughly how many lines follow).
  void reserve(size_t nodes);

  // Returns a deep copy (same names, same value ids).
  Graph clone() const;

 private:
  // Creates a value named `name` (a fresh name when empty); ValueError when the name is taken.
  Value* new_value(std::string_view name, TensorType&& type, ValueKind kind, SourceLoc loc);
  Node* make_node(OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                  std::vector<TensorType> result_types, std::vector<std::string> result_names, SourceLoc loc);
  // Appends a result value of the given name and type to `n`.
  void add_result(Node* n, std::string_view name, TensorType&& type);
  // Frees the vectors of a node taken out of nodes() (its pool slot stays until the graph dies).
  void release(Node* n);
  std::string fresh_name();

  std::string name_;
  std::string source_;
  std::vector<GroupDecl> groups_;
  std::vector<Value*> inputs_;
  std::vector<Value*> params_;
  std::vector<Node*> nodes_;
  std::vector<Value*> outputs_;
  std::vector<Value*> values_;
  StablePool<Node> node_pool_;
  StablePool<Value> value_pool_;
  NameTable by_name_;
  int64_t next_auto_name_ = 0;
};

}  // namespace dt::ir
