// libFuzzer target for opening a results database that may not be one (harness/sweep/store.cc): the
// input is the file handed to `kvbench table/report/merge` (read-only) and to `kvbench run --db`
// (read-write). Byte 0 bit 0 picks the mode; the rest is the file. Any input must open and read
// back or raise InputError / FormatError naming the file; a database that opened reads back the
// rows it counts. Seeds: make_fuzz_seeds.cc (databases written by ResultStore itself).
#include <cstddef>
#include <cstdint>

#include "harness/sweep/store.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto path = kvb::fuzz::scratch_dir() / "results.db";
  for (const char* suffix : {"-wal", "-shm", "-journal"})
    std::filesystem::remove(path.string() + suffix);
  kvb::fuzz::write_file(path, kvb::fuzz::as_text(data + 1, size - 1));
  const auto mode =
      data[0] & 1 ? kvb::ResultStore::Mode::kReadWrite : kvb::ResultStore::Mode::kReadOnly;
  kvb::fuzz::accepts([&] {
    kvb::ResultStore store(path, mode, /*busy_timeout_ms=*/0);
    const auto rows = store.load_rows();
    if (static_cast<int64_t>(rows.size()) != store.result_count())
      kvb::fuzz::violated("load_rows() and result_count() disagree");
    (void)store.load_runs();
    const auto finished = store.finished_rows();
    if (finished.size() > rows.size()) kvb::fuzz::violated("more finished rows than rows");
  });
  return 0;
}
