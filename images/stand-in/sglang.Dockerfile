# Stand-in for lmsysorg/sglang on machines that cannot pull it (scripts/build-stand-in-bases.sh):
# the torch stand-in plus one SGLang release's Python package as the contract tier installs it
# (`site/`, a copy of .sglang/<release>: `pip install --no-deps --target`), put on sys.path as
# the tier's PYTHONPATH puts it, and what its server_args and launch_server import, at the
# contract tier's versions (`requirements.txt`). It parses SGLang's command line; it serves
# nothing (no GPU, no kernels).
ARG TORCH_IMAGE=pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime
FROM ${TORCH_IMAGE}
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.txt /opt/sglang-stand-in/requirements.txt
RUN pip install -r /opt/sglang-stand-in/requirements.txt
COPY site /opt/sglang-stand-in/site
RUN python -c "import site; print(site.getsitepackages()[0])" > /tmp/site \
    && echo /opt/sglang-stand-in/site > "$(cat /tmp/site)/sglang-stand-in.pth" \
    && rm /tmp/site \
    && python -c "from sglang.srt.server_args import ServerArgs"
