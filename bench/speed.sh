#!/bin/bash
# One run of the README's speed figures (issue 20): callgrind instruction
# counts (GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOGC=off:
# valgrind cannot decode the RDTSCP the runtime uses under contention; per call =
# (total at 2n - total at n) / n), then wall ns of bench/, the interleaved
# runs against the local PostgreSQL and SQLite, and pgxretry's settlement
# CPU, at one commit. Needs valgrind and the local servers; writes
# $SPEED_DIR/result.txt (default /tmp/speed). Run: bash bench/speed.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p "${SPEED_DIR:-/tmp/speed}"
commit=$(git rev-parse --short HEAD)
out=${SPEED_DIR:-/tmp/speed}/result.txt
echo "commit $commit  $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)" > $out
cg() { # binary bench n -> total instructions
  local f=${SPEED_DIR:-/tmp/speed}/cg.$RANDOM
  GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOGC=off valgrind --tool=callgrind --callgrind-out-file=$f "$1" -test.run '^$' -test.bench "$2" -test.benchtime=${3}x >/dev/null 2>&1
  grep -m1 "^summary:\|^totals:" $f | awk '{print $2}'; rm -f $f
}
per() { # binary bench n
  local a b; a=$(cg "$1" "$2" "$3"); b=$(cg "$1" "$2" $(( $3 * 2 ))); echo $(( (b - a) / $3 ))
}
go test -c -o ${SPEED_DIR:-/tmp/speed}/root.test . || exit 1
for d in postgres mysql mssql sqlite; do go test -c -o ${SPEED_DIR:-/tmp/speed}/$d.test ./$d || exit 1; done
for op in Query Exec; do
  raw=$(per ${SPEED_DIR:-/tmp/speed}/root.test "BenchmarkWrapperPath/$op/raw\$" 20000)
  wr=$(per ${SPEED_DIR:-/tmp/speed}/root.test "BenchmarkWrapperPath/$op/wrapped\$" 20000)
  echo "wrapper $op raw $raw wrapped $wr added $((wr - raw))" >> $out
done
# A point read through database/sql, raw and wrapped, on the real servers:
# its total per call, and the wrapper's own instructions (the self cost of
# package sqlretry's functions; the totals move by +-1,500 a call with the
# scheduler's idle loop and the syscalls). Patterns anchored: an unanchored
# one also matches the much slower ...Interleaved benchmarks.
cgkeep() { # binary bench n file
  GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOGC=off valgrind --tool=callgrind --callgrind-out-file=$4 "$1" -test.run '^$' -test.bench "$2" -test.benchtime=${3}x >/dev/null 2>&1
}
for pr in 'pgx BenchmarkPostgresPointRead$/^pgx$ 4000' 'pq BenchmarkPostgresPointRead$/^pq$ 4000' 'sqlite BenchmarkSQLitePointRead$ 2000'; do
  set -- $pr
  for side in raw wrapped; do
    d=${SPEED_DIR:-/tmp/speed}
    cgkeep $d/root.test "^$2/^$side\$" $3 $d/pr.1.out
    cgkeep $d/root.test "^$2/^$side\$" $(( $3 * 2 )) $d/pr.2.out
    echo "point read $1 $side $(python3 bench/cgself.py $3 $d/pr.1.out $d/pr.2.out github.com/sqlretry/sqlretry.)" >> $out
  done
done
# Do's success path beside the hand-written loop (issue 20: at most
# 1.25x); both run under b.Loop, whose few instructions an iteration are in
# both counts.
for c in handloop sqlretry; do
  echo "do $c $(per ${SPEED_DIR:-/tmp/speed}/root.test "^BenchmarkDo\$/^$c\$" 200000)" >> $out
done
for c in net-reset fmt/net-reset sqlretry.Error/net-reset sqlretry.Error/net-timeout eof; do
  echo "classify neutral $c $(per ${SPEED_DIR:-/tmp/speed}/root.test "BenchmarkClassifyPractice/$c\$" 50000)" >> $out
done
for d in postgres mysql mssql sqlite; do
  cases=$(${SPEED_DIR:-/tmp/speed}/$d.test -test.run '^$' -test.bench BenchmarkClassifyPractice -test.benchtime=1x 2>/dev/null | grep -o 'BenchmarkClassifyPractice/[^ ]*' | sed 's/-[0-9]*$//; s/^BenchmarkClassifyPractice\///' | grep -E '^(net-reset|fmt/net-reset|sqlretry.Error/net-reset|sqlretry.Error/net-timeout|[a-z]+/[a-z0-9.]+-[0-9A-Za-z]+|[a-z]+/fmt/[a-z0-9.]+-[0-9A-Za-z]+)$' | sort -u | head -8)
  for c in $cases; do echo "classify $d $c $(per ${SPEED_DIR:-/tmp/speed}/$d.test "BenchmarkClassifyPractice/$c\$" 50000)" >> $out; done
done
# The deepest errors of practice, which the 8-case selection above misses.
for c in pg/pgconn-connect pg/fmt/pgconn-connect pg/fmt/pgconn-startup-3D000 pg/fmt/pgx-08006 libpq/fmt/pgconn-connect; do
  echo "classify postgres $c $(per ${SPEED_DIR:-/tmp/speed}/postgres.test "BenchmarkClassifyPractice/$c\$" 50000)" >> $out
done
for c in 3621-after-1205 fmt/3621-after-1205; do
  echo "classify mssql $c $(per ${SPEED_DIR:-/tmp/speed}/mssql.test "BenchmarkClassifyPractice/$c\$" 50000)" >> $out
done
# Wall ns of every error of practice in every package (issue 20: each at
# most 100 ns): the slowest five of each, and how many are over 100.
echo "--- classify wall (load $(cut -d' ' -f1-3 /proc/loadavg))" >> $out
for d in root postgres mysql mssql sqlite; do
  ${SPEED_DIR:-/tmp/speed}/$d.test -test.run '^$' -test.bench BenchmarkClassifyPractice -test.benchtime=300ms -test.benchmem 2>/dev/null | grep '^Benchmark' > ${SPEED_DIR:-/tmp/speed}/cw.$d
  echo "classify wall $d: $(wc -l < ${SPEED_DIR:-/tmp/speed}/cw.$d) cases, $(awk '$3+0 > 100' ${SPEED_DIR:-/tmp/speed}/cw.$d | wc -l) over 100 ns, $(awk '$7+0 > 0' ${SPEED_DIR:-/tmp/speed}/cw.$d | wc -l) allocating; slowest:" >> $out
  sort -k3 -g -r ${SPEED_DIR:-/tmp/speed}/cw.$d | head -5 | awk '{print "  " $1, $3, "ns"}' >> $out
done
echo "--- bench/ (wall, load $(cut -d' ' -f1-3 /proc/loadavg))" >> $out
(cd bench && GOWORK=off go test -run '^$' -bench 'Success|CommandTimeout' -benchmem -count 3 ./... 2>&1 | grep -E '^Benchmark' >> $out)
echo "--- root wall (interleaved)" >> $out
go test -run '^$' -bench 'BenchmarkSQLitePointReadInterleaved|BenchmarkPostgresSelect1Interleaved' -benchtime=300x -count 5 . 2>&1 | grep -E '^Benchmark|overhead' >> $out
echo "--- pgxretry settlement" >> $out
(cd pgxretry && go test -run '^$' -bench 'SettlementCPU' -benchtime 150x -count 3 . 2>&1 | grep -E '^Benchmark' >> $out)
(cd pgxretry && go test -run 'TestSettlementAllocs' -v -count 1 . 2>&1 | grep -E 'allocations' >> $out)
echo "done $(date -u +%FT%TZ)" >> $out
