// Reused memory for devmem::mpi's small, frequent objects (private to mpi/, not installed): the
// eager path (mpi/eager.hpp) makes one operation per small message, and glibc's malloc keeps only
// seven free blocks of a size per thread, so a window of 64 messages in flight took its locked
// arena path on most of them. PooledAllocator<T> serves std::allocate_shared from a per-thread list
// of free blocks of T's size: no lock, and a block freed on another thread than the one that took
// it simply joins that thread's list.
#pragma once

#include <cstddef>
#include <new>

namespace devmem::mpi::detail {

// The free blocks of one size on one thread. Constant-initialised and trivially destructible, so
// that it stays usable while the thread's other thread_local objects are destroyed; a
// BlockListCloser frees the blocks at thread exit and closes the list (later frees go to the
// system).
struct BlockList {
  struct Node {
    Node* next;
  };
  Node* head = nullptr;
  std::size_t count = 0;
  bool closed = false;
};

class BlockListCloser {
 public:
  explicit BlockListCloser(BlockList& list) noexcept : list_(list) {}
  BlockListCloser(const BlockListCloser&) = delete;
  BlockListCloser& operator=(const BlockListCloser&) = delete;
  BlockListCloser(BlockListCloser&&) = delete;
  BlockListCloser& operator=(BlockListCloser&&) = delete;
  ~BlockListCloser() {
    list_.closed = true;
    while (list_.head != nullptr) {
      BlockList::Node* node = list_.head;
      list_.head = node->next;
      ::operator delete(node);
    }
    list_.count = 0;
  }

 private:
  BlockList& list_;
};

// Blocks of `Size` bytes (every size class has its own list per thread).
template <std::size_t Size>
class BlockPool {
 public:
  // Enough for a few windows of messages in flight; more is given back to the system.
  static constexpr std::size_t kMaxFree = 1024;

  static void* take() {
    BlockList& list = free_list();
    if (list.head != nullptr) {
      BlockList::Node* node = list.head;
      list.head = node->next;
      --list.count;
      return node;
    }
    return ::operator new(Size);
  }

  static void give(void* block) noexcept {
    BlockList& list = free_list();
    if (list.closed || list.count >= kMaxFree) {
      ::operator delete(block);
      return;
    }
    const bool first = list.head == nullptr;
    list.head = ::new (block) BlockList::Node{list.head};
    ++list.count;
    if (first) register_closer(list);
  }

 private:
  // Registered when the list keeps its first block, and touched only then: a thread_local with a
  // destructor costs a TLS lookup and a guard on every access. Out of line and after the list's
  // update: before it, the call made give() look its list up a second time on every call.
  [[gnu::noinline]] static void register_closer(BlockList& list) {
    thread_local const BlockListCloser closer(list);
    static_cast<void>(closer);
  }

  static BlockList& free_list() noexcept {
    thread_local BlockList list;
    return list;
  }
};

// std::allocate_shared's allocator: one object at a time from BlockPool, anything else from the
// system. Under AddressSanitizer the pool is bypassed, so that a use after the last reference is
// still reported.
template <class T>
struct PooledAllocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

  PooledAllocator() noexcept = default;
  template <class U>
  PooledAllocator(const PooledAllocator<U>& /*other*/) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
#if !defined(__SANITIZE_ADDRESS__)
    if (n == 1) return static_cast<T*>(BlockPool<pool_size()>::take());
#endif
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
#if !defined(__SANITIZE_ADDRESS__)
    if (n == 1) {
      BlockPool<pool_size()>::give(p);
      return;
    }
#endif
    static_cast<void>(n);
    ::operator delete(p);
  }

  friend bool operator==(const PooledAllocator& /*a*/, const PooledAllocator& /*b*/) noexcept {
    return true;
  }

 private:
  // Sizes rounded up to 64 bytes share a list, and a block is at least a list node.
  static constexpr std::size_t pool_size() noexcept { return (sizeof(T) + 63) / 64 * 64; }
};

}  // namespace devmem::mpi::detail
