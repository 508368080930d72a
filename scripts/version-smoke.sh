#!/usr/bin/env bash
# The version matrix: for each pyspark minor release kstorm supports besides the default one,
# a clean virtualenv with the newest patch of that minor and a smoke set run in it -- the
# demo, the stateful word count killed and restarted, the windowed aggregate to Redis killed
# and restarted (and with its checkpoint deleted), a transactional topology killed and
# restarted, and the two routes of a batch's rows compared. Wheels come from pip's cache
# after the first run. Usage: bash scripts/version-smoke.sh [4.2.1 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(4.2.1)
smoke=(
  "integration_tests/test_state_kill.py::test_spark_provider_word_count_exact_after_kills_and_refused_without_checkpoint"
  "integration_tests/test_exactly_once_kill.py::test_kill_at_random_moments_and_inside_the_commit"
  "integration_tests/test_exactly_once_kill.py::test_kill_with_the_checkpoint_deleted_before_a_restart"
  "integration_tests/test_transactional_kill.py::test_kafka_spout_global_count_exact_after_kills_and_lost_checkpoint"
  "integration_tests/test_batch_rows.py"
  "integration_tests/test_environments.py::test_word_count_exact_under_temporary_directories_of_every_threshold"
)
root="${KSTORM_MATRIX_DIR:-${HOME:-/tmp}/.cache/kstorm-matrix}"
mkdir -p "$root"
rc=0
for version in "${versions[@]}"; do
  venv="$root/pyspark-$version"
  started=$(date +%s)
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$repo[dev]" "pyspark==$version"
  got=$("$venv/bin/python" -c 'import pyspark; print(pyspark.__version__)')
  echo "matrix: pyspark $got in $venv"
  demo_dir=$(mktemp -d)
  if (cd "$demo_dir" && PYSPARK_PYTHON="$venv/bin/python" "$venv/bin/kstorm" demo < /dev/null \
        > "$demo_dir/demo.log" 2>&1) && grep -q "every window count equals the ground truth" \
        "$demo_dir/demo.log"; then
    echo "matrix: pyspark $got: kstorm demo exact"
  else
    echo "matrix: pyspark $got: kstorm demo FAILED"; tail -20 "$demo_dir/demo.log"; rc=1
  fi
  rm -rf "$demo_dir"
  if ! PYSPARK_PYTHON="$venv/bin/python" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        "${smoke[@]}" < /dev/null; then
    echo "matrix: pyspark $got: smoke set FAILED"; rc=1
  fi
  echo "matrix: pyspark $got done in $(( $(date +%s) - started )) s"
done
exit "$rc"
