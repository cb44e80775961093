#!/bin/sh
# tune-fake-gpu.sh FAGEN FAKE_LIBCUDA WORKDIR: `fagen tune` end to end on the simulated GPU of
# tests/tuner/FakeGpu.cpp (real nvcc, simulated device): a full run, the numerics gate, the
# database, resume, the report, a corrupt database; then a backward workload (its own search
# space, the gradients' numerics gate, format-2 records) and a build that takes its winners;
# then a decode kernel's split rule (format-4 records, one rule over every call, the build).
set -eu
fagen=$1 fake=$2 dir=$3
rm -rf "$dir/run" && mkdir -p "$dir/run" && cd "$dir/run"
export FAGEN_LIBCUDA="$fake" FAGEN_CACHE_DIR="$dir/cache"
cat > spec.yaml <<'YAML'
variants:
  - name: gqa
    dtype: bf16
    head_dim: 64
    mask: causal
    heads: {q: 8, kv: 2}
YAML
fail() { echo "tune-fake-gpu: $*" >&2; exit 1; }

"$fagen" tune spec.yaml --arch sm_90 --shapes 64,256 --runs 3 -o tuning.db --report report.svg \
  > out1.txt 2> err1.txt || { cat err1.txt; fail "the first run failed"; }
grep -q '^fwd bf16 hd64x64 causal sm_90 *s64 ' out1.txt || fail "no summary row for s64"
grep -q '^fwd bf16 hd64x64 causal sm_90 *s256 ' out1.txt || fail "no summary row for s256"
grep -q '"status":"ok"' tuning.db || fail "no ok record"
grep -q '"status":"numerics-failed"' tuning.db || fail "the wrong-output candidates were not gated"
! grep '"status":"numerics-failed"' tuning.db | grep -q '"timings"' || fail "a failed candidate was timed"
grep -q '"heads_kv":8' tuning.db || fail "the GQA ratio of the spec is not in the bucket shape"
grep -q 'class="candidate winner"' report.svg || fail "the report marks no winner"
grep -q 'ETA' err1.txt || fail "no ETA in the progress"
lines=$(wc -l < tuning.db)

# Resume: everything is in the database, nothing is measured again.
"$fagen" tune spec.yaml --arch sm_90 --shapes 64,256 --runs 3 -o tuning.db > out2.txt 2> err2.txt \
  || { cat err2.txt; fail "the second run failed"; }
grep -q 'stage tile: 54 of 54 measurements already in tuning.db' err2.txt || { cat err2.txt; fail "no resume"; }
[ "$(wc -l < tuning.db)" -eq "$lines" ] || fail "the resumed run appended records"
cmp -s out1.txt out2.txt || fail "the summary changed on resume"

# An interrupted run: drop the last half of the records, the rerun measures only those.
head -n $((lines / 2)) tuning.db > part.db
"$fagen" tune spec.yaml --arch sm_90 --shapes 64,256 --runs 3 -o part.db > out3.txt 2> err3.txt \
  || { cat err3.txt; fail "the resumed run failed"; }
[ "$(wc -l < part.db)" -eq "$lines" ] || fail "resume measured $(wc -l < part.db) records, expected $lines"

# A corrupt database is refused with its line number (exit 1).
sed '2s/.*/{"broken"/' tuning.db > bad.db
set +e
"$fagen" tune spec.yaml --arch sm_90 --shapes 64,256 -o bad.db > /dev/null 2> err4.txt
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a corrupt database exited $rc, expected 1"
grep -q 'bad.db:2:' err4.txt || { cat err4.txt; fail "no line number for the corrupt line"; }
# The database feeds a build: the winners become the bundle's kernels, with their seqlen
# ranges and provenance; a database from another fagen version is refused unless allowed.
unset FAGEN_LIBCUDA
"$fagen" build spec.yaml --arch sm_90 --tuning tuning.db -q -o tuned.fab || fail "build --tuning failed"
"$fagen" inspect tuned.fab > inspect.txt
grep -q 'tuning: tuned s64 (1..128) on Fake GPU' inspect.txt || { cat inspect.txt; fail "no provenance"; }
grep -q 'serves max(seqlen_q, seqlen_k): ' inspect.txt || fail "no tuned seqlen range"
sed 's/"fagen":"[^"]*"/"fagen":"0.0.0-old"/g' tuning.db > old.db
set +e
"$fagen" build spec.yaml --arch sm_90 --tuning old.db -q -o old.fab 2> err5.txt
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a database of another fagen version exited $rc, expected 1"
grep -q 'tuning-allow-mismatch' err5.txt || { cat err5.txt; fail "no hint at --tuning-allow-mismatch"; }
[ ! -e old.fab ] || fail "a refused build wrote its output"
"$fagen" build spec.yaml --arch sm_90 --tuning old.db --tuning-allow-mismatch -q -o old.fab \
  || fail "--tuning-allow-mismatch did not allow it"

# The backward: hd 64 causal on the portable template (sm_90: 16 tiles of the grid pass the
# planner's checks). The fake gets the 4-warp single-stage kernels' gradients wrong.
export FAGEN_LIBCUDA="$fake"
cat > bwd.yaml <<'YAML'
variants:
  - {name: gqa, dtype: bf16, head_dim: 64, mask: causal, heads: {q: 8, kv: 2}, passes: [bwd]}
YAML
"$fagen" tune bwd.yaml --arch sm_90 --shapes 256 --runs 3 -o bwd.db > bout.txt 2> berr.txt \
  || { cat berr.txt; fail "the backward run failed"; }
grep -q 'bwd bf16 hd64x64 causal sm_90: 16 tile candidates' berr.txt || { cat berr.txt; fail "no backward space"; }
grep -q '^bwd bf16 hd64x64 causal sm_90 *s256 ' bout.txt || { cat bout.txt; fail "no backward summary row"; }
grep '"status":"ok"' bwd.db | grep -q '"format":2' || fail "a backward ok record is not format 2"
grep '"status":"ok"' bwd.db | grep -q '"max_error_dq"' || fail "no gradient numerics in a backward record"
grep '"status":"numerics-failed"' bwd.db | grep -q 'max |dQ error|' \
  || fail "the wrong backward candidates were not gated by their gradients"
! grep '"status":"numerics-failed"' bwd.db | grep -q '"timings"' || fail "a failed backward candidate was timed"
! grep -q '"stage":"softmax"' bwd.db || fail "a backward candidate in the softmax stage"
unset FAGEN_LIBCUDA
"$fagen" plan bwd.yaml --arch sm_90 --tuning bwd.db > bplan.txt || fail "plan --tuning failed"
grep -q 'tuning=tuned s256 (1..) on Fake GPU' bplan.txt || { cat bplan.txt; fail "plan did not take the backward record"; }
"$fagen" build bwd.yaml --arch sm_90 --tuning bwd.db -q -o bwd.fab || fail "build --tuning (backward) failed"
"$fagen" inspect bwd.fab | grep -q 'tuning: tuned s256 (1..) on Fake GPU' || fail "no backward provenance"

# A decode kernel's split rule: 10 rules on 3 x 2 calls, one query token each; the fake gets
# rule 2x2's output wrong. One rule wins over every call; the build takes it.
export FAGEN_LIBCUDA="$fake" FAKE_GPU_WRONG=_split2x2
cat > dec.yaml <<'YAML'
variants:
  - {name: serve, dtype: bf16, head_dim: 64, mask: causal, heads: {q: 8, kv: 2}, passes: [decode]}
  - {name: paged, dtype: bf16, head_dim: 64, mask: causal, heads: {q: 8, kv: 2}, passes: [decode],
     kv_cache: paged, page_size: 64}
YAML
"$fagen" tune dec.yaml --arch sm_90 --decode-contexts 1024,256 --runs 3 -o dec.db > dout.txt 2> derr.txt \
  || { cat derr.txt; fail "the decode run failed"; }
grep -q 'fwd bf16 hd64x64 causal decode sm_90: 10 split-rule candidates' derr.txt \
  || { cat derr.txt; fail "no decode search space"; }
grep -q '"name":"b16k1024"' dec.db || fail "no decode bucket b16k1024"
grep '"status":"ok"' dec.db | grep -q '"format":4' || fail "a decode ok record is not format 4"
grep '"status":"numerics-failed"' dec.db | grep -q '_split2x2' || fail "the wrong rule was not gated"
[ "$(grep -c '"status":"ok"' dec.db)" -eq 54 ] || fail "expected 9 passing rules x 6 calls"
rule=$(sed -n 's/^fwd bf16 hd64x64 causal decode sm_90: split rule \([0-9]*x[0-9]*\) .*over 6 calls.*/\1/p' dout.txt)
[ -n "$rule" ] || { cat dout.txt; fail "no split rule line"; }
grep -q "the default 1x4: " dout.txt || { cat dout.txt; fail "no comparison with the default rule"; }
set +e
"$fagen" tune dec.yaml --arch sm_90 --decode-contexts 0 -o dec.db > /dev/null 2> derr2.txt
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a bad --decode-contexts exited $rc, expected 2"
grep -q -- "--decode-contexts: '0' is not a sequence length" derr2.txt || { cat derr2.txt; fail "no --decode-contexts error"; }
unset FAGEN_LIBCUDA FAKE_GPU_WRONG
"$fagen" build dec.yaml --arch sm_90 --tuning dec.db -q -o dec.fab || fail "build --tuning (decode) failed"
"$fagen" inspect dec.fab > dinspect.txt
grep -q "tuning: tuned split rule $rule over 6 calls on Fake GPU" dinspect.txt \
  || { cat dinspect.txt; fail "no split-rule provenance"; }
grep -q 'not timed: fwd bf16 hd64x64 causal paged64 decode sm_90: a paged decode kernel takes' derr.txt \
  || { cat derr.txt; fail "no note on the paged kernel"; }
[ "$(grep -c "tuning: tuned split rule $rule over 6 calls" dinspect.txt)" -eq 2 ] \
  || { cat dinspect.txt; fail "the paged kernel did not take its twin's rule"; }
grep -q "(the contiguous cache's kernel's)" dinspect.txt || fail "the paged kernel's provenance"
# The fake's times (a hash of the name) make a pair other than the default win, so that the
# names spell it.
[ "$rule" != 1x4 ] || fail "the fake's timings picked the default pair: the name checks would not run"
grep -q "sm80decode_m16n64w4s[0-9]*_split$rule" dinspect.txt || { cat dinspect.txt; fail "the kernel name lacks the rule"; }
grep -q "paged64_sm80decode_m16n64w4s[0-9]*_split$rule" dinspect.txt || fail "the paged name lacks the rule"
echo "tune-fake-gpu: ok ($lines records; backward $(wc -l < bwd.db); decode $(wc -l < dec.db))"
