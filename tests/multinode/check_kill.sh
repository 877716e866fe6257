#!/usr/bin/env bash
# A rank killed in the middle of hierarchical all-reduces: every survivor fails with kPeerDead naming it, and
# nothing hangs. mpirun --enable-recovery keeps the survivors running after the death (by default mpirun would
# end the job itself), so that their errors can be checked.
#   check_kill.sh MPIEXEC TEST_PROGRAM RANKS VICTIM [kill|kill-idle]   (tests/multinode/multinode_main.cc)
set -uo pipefail
mpiexec=$1 program=$2 ranks=$3 victim=$4 mode=${5:-kill}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The survivors mark their reports here and leave once every survivor has (multinode_main.cc, leave_together).
SYMCOMM_TEST_KILL_DIR=$(mktemp -d)
export SYMCOMM_TEST_KILL_DIR
trap 'rm -rf "$SYMCOMM_TEST_KILL_DIR"' EXIT
out=$(timeout 120 "$mpiexec" --enable-recovery -x SYMCOMM_TEST_KILL_DIR -np "$ranks" "$program" --"$mode"="$victim" 2>&1)
echo "$out"
ok=$(grep -c "^survivor [0-9]*: ok" <<<"$out")
if [ "$ok" -ne $((ranks - 1)) ]; then
  echo "check_kill: $ok of $((ranks - 1)) survivors reported rank $victim dead" >&2
  exit 1
fi
