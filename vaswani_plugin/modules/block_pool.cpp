// torch's CPU allocator for large blocks: a pool of mapped blocks reused by size (speed and memory
// only; not in the paper). freed_memory.py says why and installs it; the policy, in short:
// - a block of at least `large` bytes is mapped on its own, at a size rounded up to a 32nd of the
//   power of two at or below it, and is kept when freed;
// - a request takes the smallest kept block that holds it and is at most a 16th larger;
// - a new block is mapped only after the oldest kept blocks have gone back to the kernel until the
//   mapped total stays within the most bytes ever live at once plus a 32nd.
// Smaller blocks keep the allocator that was installed before (glibc's malloc through c10).
#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace {

struct KeptBlock {
  void* data;
  size_t size;
  uint64_t freed_at;  // the pool's count of frees when it was freed
};

size_t block_size(size_t n) {
  size_t power = size_t(1) << (63 - __builtin_clzll(n));
  size_t grain = std::max<size_t>(power / 32, 4096);
  return (n + grain - 1) / grain * grain;
}

class BlockPool final : public c10::Allocator {
 public:
  BlockPool(c10::Allocator* small, size_t large) : small_(small), large_(large) {}

  c10::DataPtr allocate(size_t n) override {
    if (n < large_) return small_->allocate(n);
    void* data = take(block_size(n));
    c10::profiledCPUMemoryReporter().New(data, n);  // torch.profiler's profile_memory sees it, as with c10's own
    return {data, data, &give_back, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static void give_back(void* data);

  void keep(void* data) {
    std::unique_lock<std::mutex> guard(mutex_);
    auto found = sizes_.find(data);
    if (found == sizes_.end()) {  // a small block freed through raw_deleter() (oneDNN's scratchpads do)
      guard.unlock();
      small_->raw_deleter()(data);
      return;
    }
    size_t size = found->second;
    sizes_.erase(found);
    c10::profiledCPUMemoryReporter().Delete(data);
    live_ -= size;
    kept_bytes_ += size;
    kept_.push_back({data, size, ++frees_});
  }

  void stats(uint64_t* out) {
    std::lock_guard<std::mutex> guard(mutex_);
    out[0] = live_, out[1] = kept_bytes_, out[2] = most_live_, out[3] = maps_, out[4] = unmaps_;
  }

  void after_fork_in_child() { new (&mutex_) std::mutex(); }  // a forked child has one thread

 private:
  void* take(size_t size) {
    std::lock_guard<std::mutex> guard(mutex_);
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->size >= size && it->size <= size + size / 16 && (best == kept_.end() || it->size < best->size)) best = it;
    void* data;
    size_t got;
    if (best != kept_.end()) {
      data = best->data, got = best->size;
      remove(best);
    } else {
      while (!kept_.empty() && live_ + kept_bytes_ + size > most_live_ + most_live_ / 32) {
        auto oldest = std::min_element(kept_.begin(), kept_.end(),
                                       [](const KeptBlock& a, const KeptBlock& b) { return a.freed_at < b.freed_at; });
        munmap(oldest->data, oldest->size);
        ++unmaps_;
        remove(oldest);
      }
      data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) throw std::bad_alloc();
      got = size;
      ++maps_;
    }
    live_ += got;
    most_live_ = std::max(most_live_, live_);
    sizes_[data] = got;
    return data;
  }

  void remove(std::vector<KeptBlock>::iterator it) {
    kept_bytes_ -= it->size;
    *it = kept_.back();
    kept_.pop_back();
  }

  c10::Allocator* small_;
  size_t large_;
  std::mutex mutex_;
  std::vector<KeptBlock> kept_;  // a few hundred at most in a training step: a scan costs microseconds
  std::unordered_map<void*, size_t> sizes_;  // live blocks' sizes
  size_t live_ = 0, kept_bytes_ = 0, most_live_ = 0;
  uint64_t frees_ = 0, maps_ = 0, unmaps_ = 0;
};

BlockPool* pool = nullptr;  // never deleted: tensors may outlive every Python object

void BlockPool::give_back(void* data) { pool->keep(data); }

void reset_mutex_in_child() { pool->after_fork_in_child(); }

}  // namespace

extern "C" {

// Makes the pool torch's CPU allocator for blocks of at least `large` bytes. Once per process:
// returns 1 when it installs the pool, 0 when the pool was already installed.
int install_block_pool(size_t large) {
  if (pool != nullptr) return 0;
  pool = new BlockPool(c10::GetCPUAllocator(), large);
  pthread_atfork(nullptr, nullptr, &reset_mutex_in_child);
  c10::SetCPUAllocator(pool, /*priority=*/1);
  return 1;
}

// bytes live, bytes kept, most bytes ever live, blocks mapped, blocks unmapped (all 0 before install)
void block_pool_stats(uint64_t* out) {
  if (pool != nullptr) pool->stats(out);
  else std::fill(out, out + 5, 0);
}
}
