#!/usr/bin/env bash
# Install Debian's Nsight Systems (non-free), as it comes: its nsys cannot find its own
# QdstrmImporter and leaves a .qdstrm, which nsbridge imports itself (shared facts.md), so
# CI tests exactly that setup. Idempotent; needs root. Used by .ci/run; developers may run it too.
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
nsys --version
