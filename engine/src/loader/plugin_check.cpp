// Descriptor checks (plugin_check.hpp) and the kind names of registry.hpp.
#include "loader/plugin_check.hpp"

#include <cctype>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "base/errors.hpp"
#include "loader/registry.hpp"
#include "loader/schema.hpp"
#include "loom/loom.h"

namespace loom::engine {

namespace {

const char* const kKindNames[] = {"",     "backend",   "comm",      "model",   "attention",
                                  "grad", "optimizer", "tokenizer", "dataset", "schedule"};
constexpr int kNumKinds = 9;

std::string abi_text(uint64_t major, uint64_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Size of the function table each kind must provide at ABI 2.0.
size_t api_size_v2(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_BACKEND:
      return LOOM_BACKEND_API_SIZE_V2;
    case LOOM_KIND_COMM:
      return LOOM_COMM_API_SIZE_V2;
    case LOOM_KIND_MODEL:
      return LOOM_MODEL_API_SIZE_V2;
    case LOOM_KIND_ATTENTION:
      return LOOM_ATTENTION_API_SIZE_V2;
    case LOOM_KIND_GRAD:
      return LOOM_GRAD_API_SIZE_V2;
    case LOOM_KIND_SCHEDULE:
      return LOOM_SCHEDULE_API_SIZE_V2;
    case LOOM_KIND_OPTIMIZER:
      return LOOM_OPTIMIZER_API_SIZE_V2;
    case LOOM_KIND_TOKENIZER:
      return LOOM_TOKENIZER_API_SIZE_V2;
    case LOOM_KIND_DATASET:
      return LOOM_DATASET_API_SIZE_V2;
  }
  return 0;
}

// A function-table slot the host calls without checking it for NULL: every slot of ABI 2.0
// but those documented as optional ("NULL: ..."). A table that leaves one NULL would crash
// the host at its first use, so the plugin is refused at load, naming the slot.
struct Slot {
  size_t offset;
  const char* name;
};
#define LOOM_SLOT(api, field) \
  Slot { offsetof(api, field), #field }

const std::vector<Slot>& mandatory_slots(loom_plugin_kind kind) {
  static const std::vector<Slot> kNone;
  static const std::vector<Slot> kBackend = {
      LOOM_SLOT(loom_backend_api, create),      LOOM_SLOT(loom_backend_api, destroy),
      LOOM_SLOT(loom_backend_api, get_info),    LOOM_SLOT(loom_backend_api, alloc_tensor),
      LOOM_SLOT(loom_backend_api, free_tensor), LOOM_SLOT(loom_backend_api, to_host),
      LOOM_SLOT(loom_backend_api, from_host),   LOOM_SLOT(loom_backend_api, synchronize),
      LOOM_SLOT(loom_backend_api, ops),         LOOM_SLOT(loom_backend_api, get_ext)};
  static const std::vector<Slot> kComm = {
      LOOM_SLOT(loom_comm_api, create),       LOOM_SLOT(loom_comm_api, destroy),
      LOOM_SLOT(loom_comm_api, world_rank),   LOOM_SLOT(loom_comm_api, world_size),
      LOOM_SLOT(loom_comm_api, group_create), LOOM_SLOT(loom_comm_api, group_destroy),
      LOOM_SLOT(loom_comm_api, group_rank),   LOOM_SLOT(loom_comm_api, group_size),
      LOOM_SLOT(loom_comm_api, all_reduce),   LOOM_SLOT(loom_comm_api, reduce_scatter),
      LOOM_SLOT(loom_comm_api, all_gather),   LOOM_SLOT(loom_comm_api, broadcast),
      LOOM_SLOT(loom_comm_api, all_to_all),   LOOM_SLOT(loom_comm_api, barrier),
      LOOM_SLOT(loom_comm_api, send),         LOOM_SLOT(loom_comm_api, recv)};
  // attention_requires is optional (NULL: the model requires nothing of attention).
  static const std::vector<Slot> kModel = {
      LOOM_SLOT(loom_model_api, create),          LOOM_SLOT(loom_model_api, destroy),
      LOOM_SLOT(loom_model_api, num_params),      LOOM_SLOT(loom_model_api, get_param),
      LOOM_SLOT(loom_model_api, init_params),     LOOM_SLOT(loom_model_api, zero_grad),
      LOOM_SLOT(loom_model_api, flops_per_token), LOOM_SLOT(loom_model_api, batch_spec),
      LOOM_SLOT(loom_model_api, stage_info),      LOOM_SLOT(loom_model_api, stage_forward),
      LOOM_SLOT(loom_model_api, stage_backward),  LOOM_SLOT(loom_model_api, finish_grads)};
  static const std::vector<Slot> kAttention = {
      LOOM_SLOT(loom_attention_api, create), LOOM_SLOT(loom_attention_api, destroy),
      LOOM_SLOT(loom_attention_api, forward), LOOM_SLOT(loom_attention_api, backward)};
  // shard_params, after_step and bytes_per_param are optional.
  static const std::vector<Slot> kGrad = {LOOM_SLOT(loom_grad_api, create),
                                          LOOM_SLOT(loom_grad_api, destroy),
                                          LOOM_SLOT(loom_grad_api, reduce)};
  static const std::vector<Slot> kSchedule = {LOOM_SLOT(loom_schedule_api, create),
                                              LOOM_SLOT(loom_schedule_api, destroy),
                                              LOOM_SLOT(loom_schedule_api, run)};
  static const std::vector<Slot> kOptimizer = {
      LOOM_SLOT(loom_optimizer_api, create), LOOM_SLOT(loom_optimizer_api, destroy),
      LOOM_SLOT(loom_optimizer_api, step), LOOM_SLOT(loom_optimizer_api, num_state),
      LOOM_SLOT(loom_optimizer_api, get_state)};
  static const std::vector<Slot> kTokenizer = {
      LOOM_SLOT(loom_tokenizer_api, create),     LOOM_SLOT(loom_tokenizer_api, destroy),
      LOOM_SLOT(loom_tokenizer_api, vocab_size), LOOM_SLOT(loom_tokenizer_api, eod_id),
      LOOM_SLOT(loom_tokenizer_api, encode),     LOOM_SLOT(loom_tokenizer_api, decode)};
  // cache_prefix is optional (NULL: the data has no home on disk).
  static const std::vector<Slot> kDataset = {
      LOOM_SLOT(loom_dataset_api, create), LOOM_SLOT(loom_dataset_api, destroy),
      LOOM_SLOT(loom_dataset_api, num_documents), LOOM_SLOT(loom_dataset_api, document)};
  switch (kind) {
    case LOOM_KIND_BACKEND:
      return kBackend;
    case LOOM_KIND_COMM:
      return kComm;
    case LOOM_KIND_MODEL:
      return kModel;
    case LOOM_KIND_ATTENTION:
      return kAttention;
    case LOOM_KIND_GRAD:
      return kGrad;
    case LOOM_KIND_SCHEDULE:
      return kSchedule;
    case LOOM_KIND_OPTIMIZER:
      return kOptimizer;
    case LOOM_KIND_TOKENIZER:
      return kTokenizer;
    case LOOM_KIND_DATASET:
      return kDataset;
  }
  return kNone;
}
#undef LOOM_SLOT

// "" or the first mandatory slot the table leaves NULL (its size was checked first).
std::string null_slot(loom_plugin_kind kind, const void* api) {
  for (const Slot& slot : mandatory_slots(kind)) {
    void* p = nullptr;
    std::memcpy(&p, static_cast<const char*>(api) + slot.offset, sizeof p);
    if (p == nullptr)
      return kind_name(kind) + " function table leaves mandatory slot '" + slot.name +
             "' NULL (the host would crash calling it)";
  }
  return "";
}

// Checks one schema entry as the recipe validator will read it.
std::string check_param(const loom_param_spec& p, size_t i) {
  std::string at = "parameter " + std::to_string(i);
  if (p.struct_size < LOOM_PARAM_SPEC_SIZE_V2)
    return at + ": struct_size " + std::to_string(p.struct_size) + " is smaller than ABI 2.0's " +
           std::to_string(LOOM_PARAM_SPEC_SIZE_V2);
  if (p.name == nullptr || *p.name == '\0') return at + " has no name";
  at = "parameter '" + std::string(p.name) + "'";
  const int type = raw_enum(p.type);
  if (type < LOOM_PARAM_BOOL || type > LOOM_PARAM_STRING)
    return at + " has unknown type " + std::to_string(type);
  if (p.default_value != nullptr) {
    Value v;
    std::string problem = parse_default(p, v);
    if (!problem.empty()) return at + ": " + problem;
  }
  return "";
}

// An extension id: a name of [a-z0-9._-], a slash and a version number ("loom.decode/1").
bool valid_ext_id(const char* id) {
  if (id == nullptr) return false;
  const char* slash = std::strchr(id, '/');
  if (slash == nullptr || slash == id || slash[1] == '\0') return false;
  for (const char* c = id; c < slash; ++c)
    if (!(std::islower((unsigned char)*c) || std::isdigit((unsigned char)*c) || *c == '.' ||
          *c == '-' || *c == '_'))
      return false;
  for (const char* c = slash + 1; *c; ++c)
    if (!std::isdigit((unsigned char)*c)) return false;
  return std::strlen(id) <= 128;
}

// The capabilities list and the ext chain: well-formed ids, listed once, and every table on
// the chain announced in the list (the host finds tables by what the plugin declares).
std::string check_capabilities(const loom_plugin_descriptor* d) {
  std::set<std::string> ids;
  for (size_t i = 0; d->capabilities != nullptr && d->capabilities[i] != nullptr; ++i) {
    if (i >= 256) return "descriptor lists an implausible number of capabilities";
    const char* id = d->capabilities[i];
    if (!valid_ext_id(id))
      return "capability '" + one_line(id, 60) +
             "' is not an id of the form name/version (\"loom.decode/1\")";
    if (!ids.insert(id).second) return "capability '" + std::string(id) + "' is listed twice";
  }
  size_t n = 0;
  for (const loom_ext* e = d->ext; e != nullptr; e = e->next) {
    if (++n > 256) return "the descriptor's ext chain is too long (a cycle?)";
    if (e->struct_size < LOOM_EXT_SIZE_V2)
      return "an extension on the descriptor's ext chain has struct_size " +
             std::to_string(e->struct_size) + ", smaller than its header";
    if (e->id == nullptr || ids.count(e->id) == 0)
      return "extension '" + one_line(e->id ? e->id : "(null)", 60) +
             "' on the descriptor's ext chain is not listed in its capabilities";
  }
  return "";
}

}  // namespace

bool valid_kind(int k) { return k >= 1 && k <= kNumKinds; }

// The descriptor's one-line problem, or "".
std::string check_descriptor(const loom_plugin_descriptor* d) {
  if (d == nullptr)
    return "loom_plugin_entry returned NULL: the plugin does not support this host (Loom ABI " +
           abi_text(LOOM_ABI_MAJOR, LOOM_ABI_MINOR) + ")";
  if (d->struct_size < kVersionBytes)
    return "descriptor struct_size " + std::to_string(d->struct_size) + " is too small";
  if (d->abi_major != LOOM_ABI_MAJOR) return abi_mismatch(d->abi_major, d->abi_minor);
  if (d->struct_size < LOOM_PLUGIN_DESCRIPTOR_SIZE_V2)
    return "descriptor struct_size " + std::to_string(d->struct_size) +
           " is smaller than ABI 2.0's " + std::to_string(LOOM_PLUGIN_DESCRIPTOR_SIZE_V2);
  if (!valid_kind(raw_enum(d->kind)))
    return "unknown plugin kind " + std::to_string(raw_enum(d->kind));
  if (!valid_plugin_name(d->name))
    return d->name == nullptr || *d->name == '\0'
               ? std::string("descriptor has no name")
               : "invalid plugin name '" + one_line(d->name, 60) +
                     "' (letters, digits, '-', '_' and '.' only)";
  if (d->num_params > 0 && d->params == nullptr)
    return "descriptor lists " + std::to_string(d->num_params) + " parameters but params is NULL";
  if (d->num_params > 10000) return "descriptor lists an implausible number of parameters";
  std::set<std::string> seen;
  for (size_t i = 0; i < d->num_params; ++i) {
    std::string problem = check_param(d->params[i], i);
    if (!problem.empty()) return problem;
    if (!seen.insert(d->params[i].name).second)
      return "parameter '" + std::string(d->params[i].name) + "' is declared twice";
    if (std::strcmp(d->params[i].name, "plugin") == 0)
      return "parameter 'plugin' is reserved for the engine (it selects the plugin)";
  }
  std::string problem = check_capabilities(d);
  if (!problem.empty()) return problem;
  if (d->api == nullptr) return "descriptor has no function table (api is NULL)";
  size_t api_size = *static_cast<const size_t*>(d->api);  // every table starts with struct_size
  if (api_size < api_size_v2(d->kind))
    return kind_name(d->kind) + " function table struct_size " + std::to_string(api_size) +
           " is smaller than ABI 2.0's " + std::to_string(api_size_v2(d->kind));
  return null_slot(d->kind, d->api);
}

bool valid_plugin_name(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (const char* p = s; *p; ++p) {
    unsigned char c = static_cast<unsigned char>(*p);
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string abi_mismatch(uint64_t major, uint64_t minor) {
  std::string s = "built for Loom ABI " + abi_text(major, minor) + ", this host is " +
                  abi_text(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  if (major < LOOM_ABI_MAJOR)
    return s + " (rebuild it against the Loom " + std::to_string(LOOM_ABI_MAJOR) + " SDK)";
  return s + " (it needs a newer Loom)";
}

std::string kind_name(loom_plugin_kind kind) {
  int k = static_cast<int>(kind);
  if (k >= 1 && k <= kNumKinds) return kKindNames[k];
  return "kind" + std::to_string(k);
}

std::optional<loom_plugin_kind> kind_from_name(const std::string& name) {
  for (int k = 1; k <= kNumKinds; ++k)
    if (name == kKindNames[k]) return static_cast<loom_plugin_kind>(k);
  return std::nullopt;
}

const std::vector<std::string>& section_of_kind() {
  // grad and schedule plugins share [parallel]: `data` selects the one, `schedule` the other.
  static const std::vector<std::string> sections = {
      "",         "backend",   "comm",      "model", "attention",
      "parallel", "optimizer", "tokenizer", "data",  "parallel"};
  return sections;
}

std::string selector_of_kind(loom_plugin_kind kind) {
  if (kind == LOOM_KIND_GRAD) return "data";
  if (kind == LOOM_KIND_SCHEDULE) return "schedule";
  return "plugin";
}

}  // namespace loom::engine
