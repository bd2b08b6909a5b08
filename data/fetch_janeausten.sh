#!/usr/bin/env bash
# Fetches the built-in dataset's source: Debian's r-cran-janeaustenr package (MIT; Jane Austen's
# novels are public domain) is downloaded with `apt-get download` (not installed: no R needed),
# unpacked with dpkg-deb, and its data/Rdata.rdb copied to data/cache/janeaustenr/, with the package's
# copyright file beside it. Idempotent: nothing happens when the file is already there.
set -euo pipefail
data=$(cd "$(dirname "$0")" && pwd)
dest="$data/cache/janeaustenr"
[ -s "$dest/Rdata.rdb" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt's download user must be able to write here
if ! (cd "$work" && apt-get download r-cran-janeaustenr >/dev/null 2>&1); then
  # Fresh machines may have no package lists yet.
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  (cd "$work" && apt-get download r-cran-janeaustenr >/dev/null 2>&1) || {
    echo "error: fetch_janeausten.sh: apt-get download r-cran-janeaustenr failed" >&2; exit 1; }
fi
dpkg-deb -x "$work"/r-cran-janeaustenr_*.deb "$work/root"
source_file="$work/root/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
[ -s "$source_file" ] || { echo "error: fetch_janeausten.sh: the package has no janeaustenr/data/Rdata.rdb" >&2; exit 1; }
mkdir -p "$dest"
cp "$work/root/usr/share/doc/r-cran-janeaustenr/copyright" "$dest/copyright" 2>/dev/null || true
cp "$source_file" "$dest/Rdata.rdb.tmp.$$" && mv "$dest/Rdata.rdb.tmp.$$" "$dest/Rdata.rdb"
echo "fetched Jane Austen's novels into $dest"
