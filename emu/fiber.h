// A fiber: a function running on its own small stack, switched to and from by a hand-written
// context switch (x86-64: save the callee-saved registers, swap stack pointers; no system call).
// The emulator runs one fiber per CUDA thread. A scheduler (the OS thread's own stack) resumes a
// fiber, which runs until it yields back or its function returns. Stacks are allocated once and
// reused: reset() prepares a fiber to run a new function on the same stack.
// Under AddressSanitizer every switch is announced with __sanitizer_{start,finish}_switch_fiber,
// otherwise ASan would take the other stack for an overflow.
#pragma once
#include <cstddef>

namespace emu {

class Fiber {
  public:
    explicit Fiber(size_t stack_bytes);
    ~Fiber();
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // Prepares the fiber to call entry(arg) when next resumed. A fiber abandoned mid-way (its
    // function never returned) may be reset too: its stack is simply reused.
    void reset(void (*entry)(void*), void* arg);
    // From the scheduler: run the fiber until it yields or its function returns.
    void resume();
    // From inside the fiber: go back to the scheduler; returns when resumed again.
    void yield();
    bool finished() const { return finished_; }

    // First code a new fiber runs (called by the assembly trampoline); never returns. Not marked
    // [[noreturn]]: ASan would then reset its idea of the stack before the call, on a fiber stack.
    static void start(Fiber* self);

  private:

    char* mapping_;              // guard page + stack
    size_t mapping_bytes_;
    char* stack_lo_;             // lowest usable stack address
    size_t stack_bytes_;
    void* sp_ = nullptr;         // saved stack pointer while not running
    void* scheduler_sp_ = nullptr;
    void (*entry_)(void*) = nullptr;
    void* arg_ = nullptr;
    bool finished_ = true;
    bool started_ = false;       // reset() was followed by at least one resume()
    // AddressSanitizer bookkeeping (unused otherwise).
    void* asan_fake_stack_ = nullptr;
    const void* scheduler_stack_lo_ = nullptr;
    size_t scheduler_stack_bytes_ = 0;
};

}  // namespace emu
