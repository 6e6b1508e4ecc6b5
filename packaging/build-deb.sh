#!/usr/bin/env bash
# Build lockwarden_VERSION_all.deb with dpkg-deb: pure Python into Debian's dist-packages,
# running on Debian's own python3 and python3-* libraries.
#
#   packaging/build-deb.sh [OUTPUT_DIR]      (default: dist/)
#
# DEB_VERSION=V overrides the package version (default: __version__), e.g. to build two
# versions of one tree and test an upgrade.
#
# The systemd units are installed but not enabled: lockwarden needs a config listing the locks
# to watch before its timer is useful (`lockwarden init`, then
# `systemctl enable --now lockwarden.timer`). The cron entry and the Prometheus rules are
# examples under /usr/share/doc/lockwarden/examples/, not installed, so nothing runs twice.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-dist}
version=${DEB_VERSION:-$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/lockwarden/__init__.py)}
[ -n "$version" ] || { echo "build-deb: no __version__ in src/lockwarden/__init__.py" >&2; exit 1; }
stage=$(mktemp -d)
chmod 0755 "$stage"  # the archive root becomes "/" on install
trap 'rm -rf "$stage"' EXIT
umask 022

install_file() {  # MODE SOURCE DESTINATION (inside the package)
    install -D -m "$1" "$2" "$stage$3"
}

for module in $(cd src && find lockwarden -name '*.py' | sort); do
    install_file 0644 "src/$module" "/usr/lib/python3/dist-packages/$module"
done
install -d -m 0755 "$stage/usr/bin"
cat > "$stage/usr/bin/lockwarden" <<'SCRIPT'
#!/usr/bin/python3
import sys

from lockwarden.cli.commands import run

sys.exit(run())
SCRIPT
chmod 0755 "$stage/usr/bin/lockwarden"

install_file 0644 systemd/lockwarden.service /lib/systemd/system/lockwarden.service
install_file 0644 systemd/lockwarden.timer /lib/systemd/system/lockwarden.timer
install_file 0644 systemd/user/lockwarden.service /usr/lib/systemd/user/lockwarden.service
install_file 0644 systemd/user/lockwarden.timer /usr/lib/systemd/user/lockwarden.timer

doc=/usr/share/doc/lockwarden
install_file 0644 config.example.toml "$doc/config.example.toml"
install_file 0644 README.md "$doc/README.md"
for page in docs/*.md; do  # the README links to them as docs/NAME.md: keep that layout
    install_file 0644 "$page" "$doc/$page"
done
install_file 0644 schema/report-v2.schema.json "$doc/schema/report-v2.schema.json"  # docs/json.md links it
install_file 0644 packaging/cron.d/lockwarden "$doc/examples/cron.d/lockwarden"
install_file 0644 packaging/prometheus/lockwarden.rules.yml "$doc/examples/lockwarden.rules.yml"
install_file 0644 packaging/prometheus/lockwarden.tmpl "$doc/examples/lockwarden.tmpl"
install_file 0644 packaging/prometheus/lockwarden.inhibit.yml "$doc/examples/lockwarden.inhibit.yml"
cat > "$stage$doc/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: lockwarden

Files: *
License: MIT
COPYRIGHT
printf 'lockwarden (%s) unstable; urgency=medium\n\n  * Package built by packaging/build-deb.sh.\n' \
    "$version" | gzip -9n > "$stage$doc/changelog.Debian.gz"
install -d -m 0755 "$stage/usr/share/man/man1"
gzip -9n < packaging/man/lockwarden.1 > "$stage/usr/share/man/man1/lockwarden.1.gz"
chmod 0644 "$stage$doc/changelog.Debian.gz" "$stage/usr/share/man/man1/lockwarden.1.gz"

install -d -m 0755 "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: lockwarden
Version: $version
Architecture: all
Maintainer: lockwarden maintainers <lockwarden@localhost>
Section: admin
Priority: optional
Depends: python3 (>= 3.11), python3-psutil, python3-requests, python3-tomli-w, apprise
Suggests: python3-psycopg, python3-pymysql
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Description: health check for exclusive store locks
 lockwarden inspects configured exclusive locks (session stores, databases,
 backup repositories, the package database), says whether each is free, held,
 held too long, stale (holder provably gone) or unknown, names the holding
 process and the action to take, and alerts through apprise. Runs from a
 systemd timer (installed, not enabled), cron or by hand.
CONTROL

# Byte-compile on install and clean up on removal, as dh_python3 does. The timer follows
# dh_installsystemd's rules for a unit installed but not enabled: the admin's enable/disable is
# kept across upgrades (deb-systemd-helper), an upgrade restarts an enabled timer and never
# leaves it stopped (the previous version's prerm may have stopped it), and only a removal
# stops it. deb-systemd-invoke starts a unit only if it is enabled and policy-rc.d allows it.
cat > "$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
case "$1" in configure|abort-upgrade|abort-deconfigure|abort-remove)
    if command -v py3compile >/dev/null 2>&1; then py3compile -p lockwarden; fi
    if deb-systemd-helper debian-installed lockwarden.timer; then
        deb-systemd-helper unmask lockwarden.timer >/dev/null || true
        if deb-systemd-helper --quiet was-enabled lockwarden.timer; then
            deb-systemd-helper enable lockwarden.timer >/dev/null || true
        fi
    fi
    deb-systemd-helper update-state lockwarden.timer >/dev/null || true
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        if [ -n "$2" ]; then action=restart; else action=start; fi
        # Only an enabled timer is (re)started: deb-systemd-invoke would say "disabled or a
        # static unit, not starting it" on every fresh install, where disabled is the default.
        if systemctl --quiet is-enabled lockwarden.timer 2>/dev/null; then
            deb-systemd-invoke "$action" lockwarden.timer >/dev/null || true
        fi
    fi
    ;;
esac
POSTINST
cat > "$stage/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    deb-systemd-invoke stop lockwarden.timer lockwarden.service >/dev/null || true
fi
if command -v py3clean >/dev/null 2>&1; then py3clean -p lockwarden; fi
PRERM
cat > "$stage/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi
if [ "$1" = remove ] && [ -x /usr/bin/deb-systemd-helper ]; then
    deb-systemd-helper mask lockwarden.timer >/dev/null || true
fi
if [ "$1" = purge ]; then
    if [ -x /usr/bin/deb-systemd-helper ]; then
        deb-systemd-helper purge lockwarden.timer >/dev/null || true
        deb-systemd-helper unmask lockwarden.timer >/dev/null || true
    fi
    rm -rf /var/lib/lockwarden
fi
POSTRM
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/lockwarden_${version}_all.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
