// Test driver for MPSStoragePolicy.h: prints, as one JSON object per line, every decision
// of the header over a grid of GPUs, storage modes and sizes. The expectations live in
// test_storage_policy.py; this program only calls the header's functions.
#include <ATen/mps/MPSStoragePolicy.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>

namespace storage = at::mps::storage;

int main() {
  const std::size_t mib = storage::kMiB;
  for (bool apple : {false, true}) {
    for (bool unified : {false, true}) {
      const storage::Gpu gpu{apple, unified};
      for (storage::Storage requested : {storage::Storage::shared, storage::Storage::managed, storage::Storage::private_}) {
        for (std::size_t heap : {8 * mib, 32 * mib, 128 * mib, 1024 * mib, 1536 * mib}) {
          for (std::size_t request : {std::size_t{8}, mib, 20 * mib, 63 * mib, 64 * mib, 100 * mib, 700 * mib}) {
            const storage::HeapPlan plan = storage::plan_heap(gpu, requested, heap, request);
            std::printf("{\"kind\": \"heap\", \"apple\": %d, \"unified\": %d, \"requested\": \"%s\", \"heap\": %zu, "
                        "\"request\": %zu, \"standalone\": %d, \"storage\": \"%s\", \"heap_size\": %zu, "
                        "\"allowed\": %d}\n",
                        apple, unified, storage::storage_name(requested), heap, request,
                        plan.placement == storage::Placement::standalone, storage::storage_name(plan.storage),
                        plan.heap_size, storage::heap_storage_allowed(gpu, requested));
          }
        }
      }
      for (bool cpu_pool : {false, true}) {
        std::printf("{\"kind\": \"pool\", \"apple\": %d, \"unified\": %d, \"cpu_pool\": %d, \"stays_shared\": %d}\n", apple,
                    unified, cpu_pool, storage::device_tensor_pool_stays_shared(gpu, cpu_pool));
        std::printf("{\"kind\": \"host\", \"apple\": %d, \"unified\": %d, \"cpu_reads_at_once\": %d, \"to_cpu_pool\": %d}\n",
                    apple, unified, cpu_pool, storage::host_request_to_cpu_pool(gpu, cpu_pool));
      }
      std::printf("{\"kind\": \"sizing\", \"apple\": %d, \"unified\": %d, \"pool_options\": %d}\n", apple, unified,
                  storage::size_with_pool_options(gpu));
      std::printf("{\"kind\": \"watermark\", \"apple\": %d, \"unified\": %d, \"ratio\": %.3f, \"high\": %.3f}\n",
                  apple, unified, storage::default_low_watermark_ratio(gpu, 1.4),
                  storage::default_high_watermark_ratio(gpu, 1.7));
      for (std::int64_t stream : {0, 1, 32}) {
        std::printf("{\"kind\": \"stream\", \"apple\": %d, \"unified\": %d, \"stream\": %lld, \"may_be_current\": %d}\n",
                    apple, unified, static_cast<long long>(stream), storage::stream_may_become_current(gpu, stream, 0));
      }
      for (bool cpu_visible : {false, true}) {
        const std::size_t split = storage::cpu_pool_min_split(gpu, cpu_visible, mib);
        std::printf("{\"kind\": \"min_split\", \"apple\": %d, \"unified\": %d, \"cpu_visible\": %d, "
                    "\"upstream\": %d, \"never\": %d}\n",
                    apple, unified, cpu_visible, split == mib, split == storage::kNeverSplit);
      }
      // rule 7a: a 24 MiB block for an 8-byte scalar's 256 bytes, a 4 KiB request, 24 MiB itself;
      // blocks just within and just past 1/32 of the request
      for (bool cpu_visible : {false, true}) {
        for (std::size_t request : {std::size_t{256}, std::size_t{4096}, 24 * mib}) {
          for (std::size_t block : {request, request + request / 32, request + request / 32 + 1, 24 * mib, 2 * request}) {
            std::printf("{\"kind\": \"reuse\", \"apple\": %d, \"unified\": %d, \"cpu_visible\": %d, "
                        "\"request\": %zu, \"block\": %zu, \"may_serve\": %d}\n",
                        apple, unified, cpu_visible, request, block,
                        storage::cpu_pool_block_may_serve(gpu, cpu_visible, block, request));
          }
        }
      }
      for (bool on_default : {false, true}) {
        std::printf("{\"kind\": \"stream_alloc\", \"apple\": %d, \"unified\": %d, \"on_default\": %d, "
                    "\"may_allocate\": %d}\n",
                    apple, unified, on_default, storage::stream_may_allocate(gpu, on_default));
      }
    }
  }
  // the refusal's text, as JSON (the name holds no character JSON escapes)
  std::printf("{\"kind\": \"stream_message\", \"text\": \"%s\"}\n",
              storage::stream_refused_message("AMD Radeon Pro 5500M").c_str());
  return 0;
}
