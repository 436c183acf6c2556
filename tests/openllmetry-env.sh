#!/usr/bin/env bash
# Make .venv-openllmetry (tests/openllmetry-requirements.txt says why it is apart): a virtual
# environment whose own packages are OpenLLMetry's, with .venv's packages (this package
# installed editable, the SDKs, pytest) added after them by a .pth file. Run from the
# repository, after .venv is made: bash tests/openllmetry-env.sh
set -euo pipefail
cd "$(dirname "$0")/.."

purelib='import sysconfig; print(sysconfig.get_path("purelib"))'
base=$(.venv/bin/python -c "$purelib")
python3 -m venv .venv-openllmetry
own=$(.venv-openllmetry/bin/python -c "$purelib")
printf 'import site; site.addsitedir(%s)\n' "'$base'" >"$own/_otel_compaction_base.pth"
.venv-openllmetry/bin/python -m pip install --quiet --no-deps -r tests/openllmetry-requirements.txt
.venv-openllmetry/bin/python -c 'import opentelemetry.instrumentation.anthropic, opentelemetry.instrumentation.openai, otel_compaction, pytest'
