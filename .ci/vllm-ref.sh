#!/usr/bin/env bash
# Build (once) the reference environment in which vLLM's own v1 scheduler runs on the CPU, and
# print its python. The differential tests (tests/differential, marker vllm_ref) run under it:
#     py=$(.ci/vllm-ref.sh) && "$py" -m pytest tests/differential
# Recipe: torch 2.13.0 CPU build (a local wheel pip finds on these machines), the pure-Python
# packages vLLM's scheduler imports (.ci/vllm-ref-requirements.txt, pinned), vLLM 0.25.1 without
# its CUDA dependencies, and pytest. The environment lives outside the clone, in
# ${LATSIM_VLLM_REF:-$HOME/.cache/latsim/vllm-ref}, and is reused while its marker file records
# the same recipe; otherwise it is rebuilt from scratch. Progress goes to stderr, the python
# path alone to stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
requirements="$here/vllm-ref-requirements.txt"
venv=${LATSIM_VLLM_REF:-$HOME/.cache/latsim/vllm-ref}
python=${PYTHON:-python3}
torch_version=2.13.0
vllm_version=0.25.1
pytest_version=9.2.0

recipe() {
    echo "python $("$python" -c 'import sys; print(sys.version.split()[0])')"
    echo "torch $torch_version"
    echo "vllm $vllm_version"
    echo "pytest $pytest_version"
    echo "requirements $(sha256sum "$requirements" | cut -d' ' -f1)"
}

build() {
    echo "vllm-ref: building $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    "${pip[@]}" "torch==$torch_version" >&2
    "${pip[@]}" -r "$requirements" >&2
    "${pip[@]}" --no-deps "vllm==$vllm_version" >&2
    "${pip[@]}" "pytest==$pytest_version" >&2
    "$venv/bin/python" -c "from vllm.v1.core.sched.scheduler import Scheduler; import vllm; \
print('vllm-ref: vLLM', vllm.__version__, 'scheduler importable')" >&2
    recipe > "$venv/.latsim-vllm-ref"  # written last: a half-built environment has no marker
}

mkdir -p "$(dirname "$venv")"
exec 9> "$venv.lock"
flock 9  # concurrent jobs on one machine wait for a single build
if [[ -f "$venv/.latsim-vllm-ref" ]] && [[ "$(recipe)" == "$(cat "$venv/.latsim-vllm-ref")" ]]; then
    echo "vllm-ref: reusing $venv" >&2
else
    build
fi
echo "$venv/bin/python"
