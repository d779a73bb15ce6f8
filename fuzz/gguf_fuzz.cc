// libFuzzer target for the GGUF reader: the bytes are a whole file image.
//
// It runs what `hypura inspect` runs on a file: GgufFile::parse (the validation that
// GgufFile::open applies to a mapped file), then reads every metadata value and tensor,
// classifies the tensors and renders the inspect report as JSON and text. A failed parse must come
// with a message; a successful one must satisfy the invariants the rest of the engine relies on.
#include <cstdio>
#include <cstdlib>

#include "cli/inspect_report.h"
#include "gguf/gguf.h"
#include "model/tensor_role.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

size_t touch_value(const hypura::gguf::Value& v) {
  size_t n = v.as_u64().value_or(0) + v.as_i64().has_value() + v.as_f64().has_value();
  if (const auto* s = v.as_string()) n += s->size();
  if (const auto* a = v.as_array()) {
    for (const auto& e : *a) n += touch_value(e);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypura;
  auto file = gguf::GgufFile::parse({data, size}, "fuzz");
  if (!file.is_ok()) {
    require(!file.status().message().empty(), "error without a message");
    return 0;
  }
  volatile size_t sink = 0;
  for (const auto& [key, value] : file->metadata().entries()) sink = sink + touch_value(value);
  std::string arch = file->architecture();
  uint64_t data_offset = file->data_offset();
  for (const gguf::TensorInfo& t : file->tensors()) {
    require(t.offset >= data_offset && t.offset <= size && t.n_bytes <= size - t.offset,
            "tensor outside the file");
    require(t.offset % file->alignment() == 0, "misaligned tensor");
    require(file->find_tensor(t.name) == &t, "tensor lookup");
    const auto& traits = gguf::type_traits(t.type);
    require(t.ne[0] % traits.block_size == 0, "row not a whole number of blocks");
    model::TensorClass c = model::classify_tensor(t.name, arch);
    sink = sink + static_cast<size_t>(c.layer) + std::string_view(model::role_name(c.role)).size();
    sink = sink + static_cast<size_t>(t.n_elements());
  }
  // The report inspect prints, in both renderings.
  cli::InspectReport report = cli::build_inspect_report(*file);
  cli::InspectOptions options{.tensors = true, .full_metadata = false};
  sink = sink + cli::report_to_json(report, *file, options)
                    .dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                    .size();
  sink = sink + cli::report_to_text(report, *file, options).size();
  return 0;
}
