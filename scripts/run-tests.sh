#!/usr/bin/env bash
# make test's pytest, in two parts at once and a third after them.
#
# Most of the suite waits on real servers (ZooKeeper, etcd, hub processes, a JVM, a kubelet)
# far more than it computes, so two pytest processes on two cores finish it in a little more
# than half the time of one:
#
# - the machine's part, one test after another: everything under e2e/ (one real node per
#   machine: a kubelet, containerd, kube-proxy's rules; one control plane), the network lab
#   (tests/failure/lab: it sweeps the namespaces and links of runs it does not know, so two
#   labs at once would tear each other down) and the image builds (they share
#   images/build.sh's cache with the real node's images);
#   with it, to even the two halves out (about 27 minutes each here), the Spark tests (a JVM
#   per session, the demo in a browser) and the images' install steps;
# - the rest of tests/, at the same time;
# - then, by themselves, the tests marked "alone": they compare timings or resident memory
#   within one test, which the other part's load would move.
#
# Each part writes to its own log, printed whole when it ends (interleaved dots say nothing).
# Every part always runs; the exit status is the first failing part's.
#
# Usage: scripts/run-tests.sh PYTHON [PYTEST_ARGS...]
set -u
py=$1
shift
machine=(
	e2e
	tests/failure/test_lab.py tests/failure/test_partitions.py tests/failure/test_nemesis.py
	tests/chart/test_skaffold.py tests/chart/test_built_images.py
	tests/spark tests/chart/test_images.py
)
ignores=()
for path in "${machine[@]}"; do
	[[ $path == tests/* ]] && ignores+=("--ignore=$path")
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/hedwig-test-parts.XXXXXX")
trap 'rm -rf "$logs"' EXIT

"$py" -m pytest -q -m "not alone" "$@" "${machine[@]}" >"$logs/machine.log" 2>&1 &
machine_pid=$!
"$py" -m pytest -q -m "not alone" "$@" "${ignores[@]}" tests >"$logs/rest.log" 2>&1 &
rest_pid=$!

status=0
wait "$rest_pid" || status=$?
echo "=== the rest of tests/ (beside the machine's part)"
cat "$logs/rest.log"
wait "$machine_pid" || { s=$?; [[ $status -ne 0 ]] || status=$s; }
echo "=== the machine's part: e2e/, the network lab, the images, Spark"
cat "$logs/machine.log"
echo "=== by themselves: the tests marked alone"
"$py" -m pytest -q -m alone "$@" tests e2e || { s=$?; [[ $status -ne 0 ]] || status=$s; }
exit "$status"
