/* The OpenMP constructs the torch build compiles, for tests/orchestrator/test_openmp_entry_points.py.
 *
 * ATen's own parallel_for is `#pragma omp parallel` (ATen/ParallelOpenMP.h); torch.compile's CPU
 * code adds `for` with schedule(static, 1), collapse, nowait, single and num_threads; the x86_64
 * dependencies (oneDNN, FBGEMM, MKL's glue; their calls are in upstream's 2.2.2 x86_64
 * libtorch_cpu) add dynamic and guided loops, ordered, tasks with dependences, reductions,
 * atomics and critical sections. Each kind of loop schedule is here, on signed and unsigned
 * 32- and 64-bit counters. No header: the pragmas alone make the compiler call the runtime, so
 * this compiles for macOS without its SDK.
 */
extern int omp_get_thread_num(void);
void work(long i);

long constructs(long n, long *out, float *peak) {
  long sum = 0;
  int count = 0;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(static, 1) nowait
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(dynamic)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(dynamic, 4)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(nonmonotonic: dynamic)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(guided)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(runtime)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(auto)
    for (long i = 0; i < n; i++) work(i);
#pragma omp for schedule(static)
    for (int i = 0; i < (int)n; i++) work(i);
#pragma omp for schedule(static)
    for (unsigned i = 0; i < (unsigned)n; i++) work((long)i);
#pragma omp for schedule(static)
    for (unsigned long i = 0; i < (unsigned long)n; i++) work((long)i);
#pragma omp for schedule(dynamic)
    for (unsigned long i = 0; i < (unsigned long)n; i++) work((long)i);
#pragma omp for collapse(2)
    for (long i = 0; i < n; i++)
      for (long j = 0; j < n; j++) work(i * n + j);
#pragma omp for reduction(+: sum)
    for (long i = 0; i < n; i++) sum += i;
#pragma omp for reduction(max: peak[0]) nowait
    for (long i = 0; i < n; i++) peak[0] = peak[0] > (float)i ? peak[0] : (float)i;
#pragma omp for ordered schedule(dynamic)
    for (long i = 0; i < n; i++) {
#pragma omp ordered
      out[i] = i;
    }
#pragma omp single
    {
#pragma omp task depend(out: out[0])
      work(-1);
#pragma omp task depend(in: out[0])
      work(-2);
#pragma omp task
      work(-3);
#pragma omp taskwait
    }
#pragma omp atomic
    count += 1;
#pragma omp critical
    work(-4);
#pragma omp critical(hinted) hint(1) /* omp_sync_hint_uncontended, from omp.h */
    work(-5);
#pragma omp flush
#pragma omp barrier
#pragma omp master
    work(omp_get_thread_num());
  }
#pragma omp parallel for num_threads(4) if(n > 1)
  for (long i = 0; i < n; i++) work(i);
  return sum + count;
}
