// Differential fuzzing of the decoder against its pre-issue-16 version
// (legacy_decoder.cpp): on every input, json_decoder::decode and
// json_decoder::decode_append must accept exactly what the old decoder
// accepted, produce the same record, and reject with the same message.
// decode_append must leave a batch untouched when it rejects.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/dispatch.hpp"
#include "tests/fuzz/legacy_decoder.hpp"

namespace {

namespace core = qsp::core;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  core::dispatch old_out, new_out;
  std::string old_error, new_error, append_error;
  const bool old_ok = qsp::legacy::decode(input, old_out, old_error);
  const core::json_decoder decoder;
  const bool new_ok = decoder.decode(input, new_out, new_error);
  check(old_ok == new_ok, "decode accepts exactly what the old decoder accepted");
  if (old_ok) {
    check(old_out == new_out, "decode yields the old decoder's record");
  } else {
    check(old_error == new_error, "decode rejects with the old decoder's message");
  }
  // The batch path, appended after a record already in the batch.
  core::dispatch_batch batch;
  batch.push_back(core::dispatch{"first", 1, {"u"}});
  const core::dispatch_batch before = batch;
  const bool append_ok = decoder.decode_append(input, batch, append_error);
  check(append_ok == old_ok, "decode_append accepts exactly what the old decoder accepted");
  if (append_ok) {
    check(batch.size() == 2 && batch.at(1) == old_out, "decode_append yields the same record");
    check(batch.at(0) == before.at(0), "decode_append keeps the earlier records");
  } else {
    check(append_error == old_error, "decode_append rejects with the same message");
    check(batch == before && batch.text == before.text &&
              batch.recipients.size() == before.recipients.size(),
          "a rejected record leaves the batch as it was");
  }
  return 0;
}
