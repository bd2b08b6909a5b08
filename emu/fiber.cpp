// Fiber stacks and the context switch (see fiber.h).
#include "emu/fiber.h"

#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "emu/fiber.cpp: the context switch is written for x86-64 only"
#endif

// emu_context_switch(save, load): pushes the callee-saved registers (the System V ABI says every
// other register may be clobbered by a call), stores the stack pointer in *save, loads `load` as
// the new stack pointer, pops that context's registers and returns into it.
// emu_fiber_trampoline: where a fresh fiber "returns" to on its first switch; reset() leaves the
// Fiber* in r12, which becomes the first argument of Fiber::start.
extern "C" void emu_context_switch(void** save, void* load);
extern "C" void emu_fiber_trampoline();
// Not instrumented: ASan would announce the call to start() (which never returns) with
// __asan_handle_no_return, and GCC 12's version of it fails on a fiber stack.
extern "C" __attribute__((no_sanitize_address)) void emu_fiber_start(void* fiber) {
    emu::Fiber::start((emu::Fiber*)fiber);
}
asm(R"(
    .text
    .globl emu_context_switch
    .type emu_context_switch, @function
emu_context_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_context_switch, .-emu_context_switch

    .globl emu_fiber_trampoline
    .type emu_fiber_trampoline, @function
emu_fiber_trampoline:
    movq %r12, %rdi
    call emu_fiber_start
    ud2
    .size emu_fiber_trampoline, .-emu_fiber_trampoline
)");

namespace emu {

namespace {
// Announce a switch to the stack [lo, lo + bytes); fake_stack saves this side's ASan state.
inline void before_switch(void** fake_stack, const void* lo, size_t bytes) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(fake_stack, lo, bytes);
#else
    (void)fake_stack, (void)lo, (void)bytes;
#endif
}
// Called on arrival; reports the stack we came from.
inline void after_switch(void* fake_stack, const void** from_lo, size_t* from_bytes) {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, from_lo, from_bytes);
#else
    (void)fake_stack, (void)from_lo, (void)from_bytes;
#endif
}
}  // namespace

Fiber::Fiber(size_t stack_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_bytes_ = (stack_bytes + page - 1) / page * page;
    mapping_bytes_ = stack_bytes_ + page;
    void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map a %zu-byte fiber stack\n", mapping_bytes_);
        abort();
    }
    mapping_ = (char*)m;
    // The lowest page stays inaccessible: a fiber overflowing its stack faults instead of
    // silently corrupting the neighbouring stack.
    mprotect(mapping_, page, PROT_NONE);
    stack_lo_ = mapping_ + page;
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

void Fiber::reset(void (*entry)(void*), void* arg) {
#ifdef EMU_ASAN
    // A fiber abandoned mid-function leaves its frames' redzones poisoned; clear them.
    if (started_ && !finished_) __asan_unpoison_memory_region(stack_lo_, stack_bytes_);
#endif
    entry_ = entry;
    arg_ = arg;
    finished_ = false;
    started_ = false;
    // Initial frame, as emu_context_switch expects to find it (lowest address first):
    // r15 r14 r13 r12 rbx rbp, return address. The trampoline is entered with rsp 16-aligned,
    // so its `call` gives Fiber::start the alignment the ABI requires.
    void** top = (void**)(stack_lo_ + stack_bytes_);
    void** frame = top - 7;
    for (int i = 0; i < 6; i++) frame[i] = nullptr;
    frame[3] = this;                           // r12
    frame[6] = (void*)&emu_fiber_trampoline;   // return address
    sp_ = frame;
}

void Fiber::resume() {
    started_ = true;
    void* scheduler_fake_stack = nullptr;
    before_switch(&scheduler_fake_stack, stack_lo_, stack_bytes_);
    emu_context_switch(&scheduler_sp_, sp_);
    after_switch(scheduler_fake_stack, nullptr, nullptr);
}

void Fiber::yield() {
    before_switch(&asan_fake_stack_, scheduler_stack_lo_, scheduler_stack_bytes_);
    emu_context_switch(&sp_, scheduler_sp_);
    after_switch(asan_fake_stack_, &scheduler_stack_lo_, &scheduler_stack_bytes_);
}

void Fiber::start(Fiber* self) {
    after_switch(nullptr, &self->scheduler_stack_lo_, &self->scheduler_stack_bytes_);
    self->entry_(self->arg_);
    self->finished_ = true;
    // Leave for good: a null fake-stack slot tells ASan this stack's frames are gone.
    before_switch(nullptr, self->scheduler_stack_lo_, self->scheduler_stack_bytes_);
    void* unused;
    emu_context_switch(&unused, self->scheduler_sp_);
    __builtin_unreachable();
}

}  // namespace emu
