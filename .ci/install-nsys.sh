#!/usr/bin/env bash
# Install Debian's Nsight Systems (non-free) and fix its importer path (see shared facts.md).
# Idempotent; needs root. Used by .ci/run; developers may run it too.
set -euo pipefail
if command -v nsys >/dev/null 2>&1; then
  exit 0
fi
cat > /etc/apt/sources.list.d/nsbridge-nonfree.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nsight-systems >/dev/null
# Debian's layout hides the QdstrmImporter from nsys: link it where nsys looks.
if [ -d /usr/lib/nsight-systems/host-linux-x64 ] && [ ! -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ]; then
  mkdir -p /usr/lib/x86_64-linux-gnu/nsight-systems
  ln -s /usr/lib/nsight-systems/host-linux-x64 /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64
fi
nsys --version
