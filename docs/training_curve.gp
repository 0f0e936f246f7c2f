# The training curve of docs/TRAINING.md, from a metrics.csv of pgq train:
#   gnuplot -e "metrics='runs/train1000/metrics.csv'; out='docs/img/train1000.png'" docs/training_curve.gp
set terminal pngcairo size 1000,550
set output out
set datafile separator ","
set key autotitle columnhead
set title "pgq train --model small (default corpus: Debian fortunes), 2 threads"
set xlabel "step"
set ylabel "cross-entropy (nats per byte)"
set grid
set yrange [1.5:6]
plot metrics using 1:2 with lines lw 1 lc rgb '#9ecae1' title "training loss", \
     metrics using 1:($3 > 0 ? $3 : 1/0) with linespoints pt 7 ps 0.8 lw 2 lc rgb '#d62728' title "validation loss (held-out 10%)"
