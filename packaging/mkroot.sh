#!/bin/sh
# Make (once) a Debian root for the package tests: mkroot.sh DIR ARCH [SUITE]
# bookworm with systemd as init and the .deb's Debian dependencies preinstalled, so installing the
# package needs no network. A foreign ARCH (arm64, armhf) is made with debootstrap --foreign and
# finished under qemu-user (binfmt). The root is complete only when DIR/.complete exists.
set -eu
dir=$1
arch=$2
suite=${3:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ -e "$dir/.complete" ] && exit 0
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
pkgs=systemd,systemd-sysv,dbus,python3
# Debian dependencies of the .deb, installed by apt (debootstrap does not resolve virtual packages)
deps="python3-cryptography python3-nacl python3-bcrypt python3-systemd"
host=$(dpkg --print-architecture)
if [ "$arch" = "$host" ]; then
    debootstrap --variant=minbase --arch="$arch" --include="$pkgs" "$suite" "$dir" "$mirror"
else
    # qemu-user through binfmt_misc (F flag: the interpreter is opened now, so it works in the chroot)
    qemu=$(case "$arch" in arm64) echo qemu-aarch64;; armhf) echo qemu-arm;; *) echo "qemu-$arch";; esac)
    if [ ! -e "/proc/sys/fs/binfmt_misc/$qemu" ]; then
        [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        update-binfmts --enable "$qemu"
    fi
    debootstrap --variant=minbase --foreign --arch="$arch" --include="$pkgs" "$suite" "$dir" "$mirror"
    chroot "$dir" /debootstrap/debootstrap --second-stage
fi
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
chroot "$dir" apt-get update -q
DEBIAN_FRONTEND=noninteractive chroot "$dir" apt-get install -y -q --no-install-recommends $deps
# a root password-less console and a machine id, as a booted system wants
echo "edged-test" > "$dir/etc/hostname"
: > "$dir/etc/machine-id"
chroot "$dir" apt-get clean
touch "$dir/.complete"
