export VIRTUAL_ENV=/work/wt/r6-channels/.venv
export PATH=/work/wt/r6-channels/.venv/bin:/work/main/.tools/venv/bin:$PATH
export PERSYN_HOME=$(mktemp -d /tmp/ph-r6-channels.XXXX)
export UV_COMPILE_BYTECODE=1
unset ANTHROPIC_API_KEY OPENAI_API_KEY
