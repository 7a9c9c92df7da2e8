/* The shared-memory sum of the ranks of one host (torchrankboost.parallel.shm).
 *
 * trb_shm_allreduce: the sum over W processes of one host through a shared mapping, for the
 * data-parallel histograms (a loopback socket all-reduce costs ~1 ms per call). Layout of
 * the mapping: ctrl (int64) [0] arrivals (monotonic), [1] abort flag, [8 + r] pid of rank r;
 * then 2 sets x W slots of cap doubles. Reduction `epoch` (the same count on every rank, as
 * every rank makes the same collective calls) uses slot set epoch % 2: a rank writes its
 * slot, arrives, waits until all W have arrived, then sums the W slots in rank order (the
 * same result on every rank). Two sets make a second barrier unnecessary: no rank can write
 * set e % 2 again (epoch e + 2) before every rank has arrived at e + 1, after reading e.
 * Returns 0, or 1 on timeout, 2 when a peer process died, 3 on abort.
 *
 * Plain C99 (gnu99 for the __atomic builtins), loaded through ctypes; no Python C API. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

int trb_shm_abi_version(void) { return 1; }

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

int trb_shm_allreduce(int64_t *ctrl, double *slots, int64_t cap, int rank, int W, double *buf,
                      int64_t len, int64_t epoch, double timeout_s)
{
    const int64_t set = epoch & 1;
    double *mine = slots + (set * W + rank) * cap;
    memcpy(mine, buf, sizeof(double) * (size_t)len);
    __atomic_fetch_add(&ctrl[0], 1, __ATOMIC_ACQ_REL);
    const int64_t target = (epoch + 1) * (int64_t)W;
    double t0 = -1.0;
    for (int64_t spin = 0; __atomic_load_n(&ctrl[0], __ATOMIC_ACQUIRE) < target; spin++) {
        if (__atomic_load_n(&ctrl[1], __ATOMIC_ACQUIRE)) return 3;
        if (spin < 2000) continue;
        sched_yield();
        if ((spin & 1023) == 0) {
            double t = now_s();
            if (t0 < 0) t0 = t;
            int failure = t - t0 > timeout_s ? 1 : 0;
            for (int r = 0; r < W && !failure; r++) {
                pid_t pid = (pid_t)__atomic_load_n(&ctrl[8 + r], __ATOMIC_ACQUIRE);
                if (pid > 0 && !process_alive(pid)) failure = 2;
            }
            /* a peer that arrived and then exited has left its slot complete */
            if (failure && __atomic_load_n(&ctrl[0], __ATOMIC_ACQUIRE) < target) return failure;
        }
    }
    const double *base = slots + set * W * cap;
    for (int64_t i = 0; i < len; i++) {
        double acc = base[i];
        for (int r = 1; r < W; r++) acc += base[(int64_t)r * cap + i];
        buf[i] = acc;
    }
    return 0;
}
