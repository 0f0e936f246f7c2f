#!/bin/bash
# Paired A/B, A B A B ...: the build before issue 30's refactor (8036d8d, /work/wt-base)
# against main; each pair's ratio from the benchmarks' own real_time.
F='f32Step/small/threads:2|profiledStep/small|small_FB/|f32Step/medium|medium_FB/|gpt2_width_FB|profiledStep/gpt2_width'
for round in 1 2 3; do
  for v in base:/work/wt-base new:/work/main; do
    n=${v%%:*}; d=${v#*:}
    (cd $d && build/bench/train_step_bench --benchmark_filter="$F" --benchmark_min_time=2 --benchmark_format=csv 2>/dev/null | grep '^"' > /tmp/ab2/step_${n}_${round}.csv)
    (cd $d && build/bench/perf_smoke > /tmp/ab2/smoke_${n}_${round}.txt 2>&1)
  done
done
echo done > /tmp/ab2/DONE
