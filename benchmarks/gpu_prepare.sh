#!/usr/bin/env bash
# What the GPU machine needs beside the checkout, in two folders git ignores, for the device
# tool to carry there (carry [".whl", ".gpu_data"]): the Python packages its image lacks
# (benchmarks/gpu_wheels.sh) and the shared data sets (../shared/data: Beijing, METR-LA's
# week and Milan, about 10 MB) that benchmarks/gpu_campaign.py's plans read. Run here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash benchmarks/gpu_wheels.sh
shared=../shared/data
rm -rf .gpu_data && mkdir -p .gpu_data
for name in beijing_multisite metr_la_week milan_telecom; do
    if [ -d "$shared/$name" ]; then
        cp -r "$shared/$name" .gpu_data/
    else
        echo "gpu_prepare: $shared/$name is absent; plans that read it will fail" >&2
    fi
done
chmod -R u+w .gpu_data
du -sh .whl .gpu_data
