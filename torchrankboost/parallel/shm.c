/* The shared-memory sum of the ranks of one host (torchrankboost.parallel.shm).
 *
 * trb_shm_allreduce: the sum over W processes of one host through a shared mapping, for the
 * data-parallel histograms (a loopback socket all-reduce costs ~1 ms per call), of float64
 * values or (is_int) of int64 values (the fixed-point histograms: an exact sum, wrapping
 * modulo 2^64 like torch's). Layout of the mapping: ctrl (int64) [0] arrivals (monotonic), [1] abort flag, [2] futex word,
 * [8 + r] pid of rank r, [8 + W + r] the reductions rank r has arrived at (who is late);
 * then 2 sets x W slots of cap 8-byte values. Reduction `epoch` (the same count on every rank, as
 * every rank makes the same collective calls) uses slot set epoch % 2: a rank writes its
 * slot, arrives, waits until all W have arrived, then sums the W slots in rank order (the
 * same result on every rank). Two sets make a second barrier unnecessary: no rank can write
 * set e % 2 again (epoch e + 2) before every rank has arrived at e + 1, after reading e.
 * Waiting: a rank spins briefly (a peer usually arrives within microseconds), then yields,
 * then sleeps on a futex (ctrl[2], the count of completed reductions, bumped and woken by the
 * last rank to arrive) in slices of at most 20 ms, checking between slices that every peer
 * process is alive and that the timeout has not passed: a stopped or slow peer costs the
 * others no CPU.
 * Returns 0, or 1 on timeout, 3 on abort, 4 + r when the process of rank r died.
 *
 * Plain C99 (gnu99 for the __atomic builtins), loaded through ctypes; no Python C API. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int trb_shm_abi_version(void) { return 3; }

/* the futex word: the low 32 bits of ctrl[2] (a shared mapping: no FUTEX_PRIVATE_FLAG) */
static uint32_t *futex_word(int64_t *ctrl)
{
    return (uint32_t *)(void *)&ctrl[2];
}

/* Sleep until the futex word differs from `seen` or `seconds` pass (a short sleep where
 * there is no futex). */
static void sleep_on(int64_t *ctrl, uint32_t seen, double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
#ifdef __linux__
    syscall(SYS_futex, futex_word(ctrl), FUTEX_WAIT, seen, &ts, NULL, 0);
#else
    (void)ctrl; (void)seen;
    nanosleep(&ts, NULL);
#endif
}

static void wake_all(int64_t *ctrl)
{
    __atomic_fetch_add(futex_word(ctrl), 1u, __ATOMIC_ACQ_REL);
#ifdef __linux__
    syscall(SYS_futex, futex_word(ctrl), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 0 when the process is gone: no such pid, or a zombie (exited, not yet reaped). */
static int process_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fh = fopen(path, "r");
    if (fh == NULL) return 1; /* no /proc: trust kill() */
    size_t got = fread(buf, 1, sizeof buf - 1, fh);
    fclose(fh);
    buf[got] = 0;
    const char *close = strrchr(buf, ')');
    if (close == NULL || close[1] == 0 || close[2] == 0) return 1;
    return !(close[2] == 'Z' || close[2] == 'X');
}

/* 0 when every peer has arrived; 1 timeout, 4 + r dead rank r (checked every few ms) */
static int check_peers(int64_t *ctrl, int W, double t0, double timeout_s)
{
    for (int r = 0; r < W; r++) {
        pid_t pid = (pid_t)__atomic_load_n(&ctrl[8 + r], __ATOMIC_ACQUIRE);
        if (pid > 0 && !process_alive(pid)) return 4 + r;
    }
    return now_s() - t0 > timeout_s ? 1 : 0;
}

/* buf[i] := the sum over the W slots of `base` (stride cap), in rank order. */
static void sum_slots_f64(const double *base, int64_t cap, int W, double *buf, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        double acc = base[i];
        for (int r = 1; r < W; r++) acc += base[(int64_t)r * cap + i];
        buf[i] = acc;
    }
}

static void sum_slots_i64(const int64_t *base, int64_t cap, int W, int64_t *buf, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        uint64_t acc = (uint64_t)base[i]; /* unsigned: wraps as torch's int64 sum, never UB */
        for (int r = 1; r < W; r++) acc += (uint64_t)base[(int64_t)r * cap + i];
        buf[i] = (int64_t)acc;
    }
}

int trb_shm_allreduce(int64_t *ctrl, void *slots, int64_t cap, int rank, int W, void *buf,
                      int64_t len, int64_t epoch, double timeout_s, int is_int)
{
    const int64_t set = epoch & 1;
    char *mine = (char *)slots + 8 * (set * W + rank) * cap;
    memcpy(mine, buf, 8 * (size_t)len);
    const int64_t target = (epoch + 1) * (int64_t)W;
    __atomic_store_n(&ctrl[8 + W + rank], epoch + 1, __ATOMIC_RELEASE);
    if (__atomic_add_fetch(&ctrl[0], 1, __ATOMIC_ACQ_REL) == target) wake_all(ctrl);
    double t0 = -1.0, slice = 1e-4;
    for (int64_t spin = 0; __atomic_load_n(&ctrl[0], __ATOMIC_ACQUIRE) < target; spin++) {
        if (__atomic_load_n(&ctrl[1], __ATOMIC_ACQUIRE)) return 3;
        if (spin < 2000) continue;
        if (t0 < 0) t0 = now_s();
        if (spin < 6000) { sched_yield(); continue; }
        uint32_t seen = __atomic_load_n(futex_word(ctrl), __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&ctrl[0], __ATOMIC_ACQUIRE) >= target) break;
        sleep_on(ctrl, seen, slice);
        slice = slice * 2 < 0.02 ? slice * 2 : 0.02;
        int failure = check_peers(ctrl, W, t0, timeout_s);
        /* a peer that arrived and then exited has left its slot complete */
        if (failure && __atomic_load_n(&ctrl[0], __ATOMIC_ACQUIRE) < target) return failure;
    }
    const char *base = (const char *)slots + 8 * set * W * cap;
    if (is_int)
        sum_slots_i64((const int64_t *)base, cap, W, (int64_t *)buf, len);
    else
        sum_slots_f64((const double *)base, cap, W, (double *)buf, len);
    return 0;
}
