/* Research instrument (not product code): make the libraries that
 * scripts/avx2_proxy/proxy.py copied and patched see an AVX2-only CPU on an
 * AVX-512 one.
 *
 * proxy.py rewrites each `cpuid` (0F A2) in a library's code to `ud2` (0F 0B)
 * and each `xgetbv` (0F 01 D0) to `ud1 eax,eax` (0F B9 C0).  Executing either
 * raises SIGILL; this handler runs the real instruction, clears what an AVX2-only
 * x86-64 (AMD Zen 3) does not have -- every AVX-512 feature bit, AVX-VNNI, and
 * the AVX-512 state bits (5-7) of XCR0 -- and resumes after the instruction.
 * Loaded with LD_PRELOAD.  Libraries not patched see the real CPU's instructions.
 *
 * /proc/cpuinfo, which the pipeline reads to report the CPU and to choose its
 * INT8 recipes, is answered from the file AVX2_PROXY_CPUINFO names (proxy.py
 * writes it: the same text without those flags) for every open() of it.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>

static int installed; /* our SIGILL handler is in place */

static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static void mask_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
  if (leaf == 7 && sub == 0) {
    /* EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 */
    r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
    /* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 */
    r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
    /* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, FP16 23, AMX 22/24/25 */
    r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
  } else if (leaf == 7 && sub == 1) {
    /* EAX: AVX-VNNI 4, AVX512_BF16 5; EDX: AVX10 19 */
    r[0] &= ~((1u << 4) | (1u << 5));
    r[3] &= ~(1u << 19);
  } else if (leaf == 0xD && sub == 0) {
    r[0] &= ~0xE0u; /* XCR0 bits the CPU supports: no opmask/ZMM state */
  }
}

static void on_sigill(int sig, siginfo_t *info, void *raw) {
  (void)info;
  ucontext_t *uc = raw;
  greg_t *g = uc->uc_mcontext.gregs;
  const uint8_t *ip = (const uint8_t *)g[REG_RIP];
  if (ip[0] == 0x0F && ip[1] == 0x0B) { /* was cpuid */
    uint32_t r[4];
    uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
    cpuid(leaf, sub, r);
    mask_cpuid(leaf, sub, r);
    g[REG_RAX] = r[0]; g[REG_RBX] = r[1]; g[REG_RCX] = r[2]; g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
    return;
  }
  if (ip[0] == 0x0F && ip[1] == 0xB9 && ip[2] == 0xC0) { /* was xgetbv */
    uint32_t lo, hi, which = (uint32_t)g[REG_RCX];
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(which));
    if (which == 0) lo &= ~0xE0u;
    g[REG_RAX] = lo; g[REG_RDX] = hi;
    g[REG_RIP] += 3;
    return;
  }
  /* A real illegal instruction: die as the process would have. */
  installed = 0;
  signal(sig, SIG_DFL);
}

/* Keep this handler: a library that installs its own SIGILL handler (Paddle's
 * glog failure handler, Python's faulthandler) would otherwise replace it. */
typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  static sigaction_fn real;
  if (!real) real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  if (sig == SIGILL && installed && act) {
    if (old) real(sig, 0, old);
    return 0;
  }
  return real(sig, act, old);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigill;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, 0);
  installed = 1;
}

/* open()/openat() of /proc/cpuinfo -> the filtered copy */
static const char *cpuinfo_path(const char *path) {
  const char *alt = getenv("AVX2_PROXY_CPUINFO");
  return (alt && path && strcmp(path, "/proc/cpuinfo") == 0) ? alt : path;
}

#define OPEN_WRAPPER(name)                                                   \
  int name(const char *path, int flags, ...) {                               \
    static int (*real)(const char *, int, ...);                              \
    if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
    mode_t mode = 0;                                                         \
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {               \
      va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
    }                                                                        \
    return real(cpuinfo_path(path), flags, mode);                            \
  }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(name)                                                 \
  int name(int dirfd, const char *path, int flags, ...) {                    \
    static int (*real)(int, const char *, int, ...);                         \
    if (!real) real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
    mode_t mode = 0;                                                         \
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {               \
      va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
    }                                                                        \
    return real(dirfd, cpuinfo_path(path), flags, mode);                     \
  }
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)
