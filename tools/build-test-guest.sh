#!/bin/bash
# Build the tiny test guest used by the real-VM tests, offline from Debian packages.
#
#   tools/build-test-guest.sh            # prints the path of the qcow2 image
#
# The guest is Debian's cloud kernel (linux-image-cloud-amd64: built for virtual
# machines, it boots under TCG in about half the CPU time of the generic kernel, which
# probes for hardware a guest does not have) plus a busybox initramfs on a FAT partition
# booted by syslinux (installed through mtools: no mounts, no loop devices).
# Its init brings up eth0 with DHCP, prints the NoCloud config drive's
# instance-id and user-data and the metadata server's answers on marker lines
# to the serial console, starts an SSH server, then stays up:
#
#   ETCD-COMPUTE-GUEST ip=<address>
#   ETCD-COMPUTE-GUEST configdrive instance-id=<id>
#   ETCD-COMPUTE-GUEST configdrive user-data=<first line>
#   ETCD-COMPUTE-GUEST metadata instance-id=<id>
#   ETCD-COMPUTE-GUEST metadata user-data=<first line>
#   ETCD-COMPUTE-GUEST hostname=<name>
#   ETCD-COMPUTE-GUEST sshd host-key=ssh-ed25519 <base64>
#   ETCD-COMPUTE-GUEST sshd ready keys=<n>
#   ETCD-COMPUTE-GUEST ready
#
# ("sshd failed" in place of the two sshd lines if it did not start). SSH: Debian's
# dropbear (dropbear-bin, its shared libraries and the dynamic loader, as ldd lists them)
# on port 22, public-key login only, for the user root. Root, because this guest has no
# other: its programs (mounting the drives, ip, the tests' scripts) need root, and a
# busybox guest has no sudo to lend it to another user (CirrOS's `cirros` user has
# sudo). So Tempest's `image_ssh_user` is root. Its authorized_keys holds the config
# drive's public-keys (meta-data) or, where the drive has none, the metadata server's
# public-keys/0/openssh-key: the instance's key pair. A guest booted without one has no
# authorized key, and its SSH server admits no one. Its ed25519 host key is made at each
# boot, while DHCP is awaited (0.05 s under TCG once the kernel's random pool is ready,
# at once with the virtio-rng device the compute gives each guest; without one the
# kernel makes it from timing jitter, about 1 s of CPU under TCG), and printed on the
# console, where the user checks the key ssh shows the first time. `metadata PATH` is a
# command there too (`ssh root@<ip> metadata meta-data/instance-id`), and dbclient
# (dropbear's ssh client) reaches the other guests. Its hostname is its metadata's, as
# cloud-init sets it: the config drive's local-hostname, else the metadata server's
# meta-data/hostname (Tempest's MetadataDowntimeMeter compares the two). Debian's curl
# (this machine's, with its shared libraries, as for dropbear) is there too: Tempest's
# scenario tests run `curl http://169.254.169.254/...` in the guest.
#
# A user-data whose first line starts with "#!" is then run as a busybox sh
# script, its output on the console, followed by
#
#   ETCD-COMPUTE-GUEST user-data script exit=<status>
#
# The script may `. /etc/guest-functions` for `say` (a marker line) and
# `metadata PATH` (the body of http://169.254.169.254/latest/PATH; fails on
# no answer or a status other than 200, with status 2 when refused or unreachable: the
# boot asks again only after other failures, so a host without a metadata server or a
# guest without a network costs no retries).
#
# Needs root (apt-get). The result is cached in $ETCD_COMPUTE_GUEST_CACHE
# (default ~/.cache/etcd-compute/test-guest) under a hash of this script and
# the kernel version, so a second run only prints the path.
set -euo pipefail

CACHE_DIR=${ETCD_COMPUTE_GUEST_CACHE:-$HOME/.cache/etcd-compute/test-guest}
PACKAGES="busybox-static syslinux syslinux-common mtools dosfstools qemu-utils cpio kmod fdisk curl"
# SSH: Debian's dropbear packages, unpacked into the image (not installed here):
# dropbear-bin and the libraries of its that a Debian machine may lack (ldd finds the
# rest here). The server, its key maker, and its client (ssh from guest to guest).
SSH_PACKAGES="dropbear-bin libtomcrypt1 libtommath1"
SSH_PROGRAMS="usr/sbin/dropbear usr/bin/dropbearkey usr/bin/dbclient"
# This machine's programs (their packages in PACKAGES) copied in with their libraries.
MACHINE_PROGRAMS="usr/bin/curl"
# The kernel modules the guest loads (everything else it needs is built in).
MODULES="virtio_pci virtio_net virtio_blk virtio_rng ata_piix sr_mod isofs vfat nls_cp437 nls_ascii"

log() { echo "build-test-guest: $*" >&2; }

install_packages() {
    local missing=()
    for package in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    apt-get update -qq
    # Another apt holding dpkg's lock is waited for (a CI run once failed on it).
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        "${missing[@]}" >/dev/null
}

# The version linux-image-cloud-amd64 currently depends on, e.g. 6.1.0-56-cloud-amd64.
kernel_version() {
    local version
    version=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: linux-image-\([0-9].*-cloud-amd64\)$/\1/p' | head -n1)
    if [ -z "$version" ]; then
        apt-get update -qq
        version=$(apt-cache depends linux-image-cloud-amd64 \
            | sed -n 's/^ *Depends: linux-image-\([0-9].*-cloud-amd64\)$/\1/p' | head -n1)
    fi
    [ -n "$version" ] || { log "cannot find the kernel linux-image-cloud-amd64 depends on"; exit 1; }
    echo "$version"
}

# Print module paths (relative to the modules dir) in load order: dependencies first.
module_load_order() {
    local modules_dir=$1; shift
    declare -A seen=()
    visit() {
        local name=$1 line path dep
        line=$(grep -E "/${name//_/[_-]}\.ko(\.xz|\.zst)?:" "$modules_dir/modules.dep" || true)
        if [ -z "$line" ]; then
            # Built into the kernel: nothing to load.
            grep -qE "/${name//_/[_-]}\.ko" "$modules_dir/modules.builtin" \
                || { log "module $name not found"; exit 1; }
            return
        fi
        path=${line%%:*}
        [ -n "${seen[$path]:-}" ] && return
        seen[$path]=1
        for dep in ${line#*:}; do
            dep=$(basename "$dep"); visit "${dep%%.ko*}"
        done
        echo "$path"
    }
    for module in "$@"; do visit "$module"; done
}

# download DIR PACKAGE...: the packages' .debs into DIR (the package lists updated and
# asked again if a version they name is gone from the mirror).
download() {
    local dir=$1; shift
    (cd "$dir" && apt-get download -qq "$@" 2>/dev/null) && return
    apt-get update -qq
    (cd "$dir" && apt-get download -qq "$@" 2>/dev/null)
}

# install_programs ROOT UNPACKED PATH...: the programs at UNPACKED/PATH (UNPACKED empty:
# this machine's) into ROOT/bin,
# with every shared library they load (from UNPACKED first, else this machine's, which
# is the same Debian release) at its path and the dynamic loader, as ldd lists them.
install_programs() {
    local root=$1 unpacked=$2 program listed library
    shift 2
    for program in "$@"; do
        cp "$unpacked/$program" "$root/bin/"
        listed=$(LD_LIBRARY_PATH="$unpacked/usr/lib/x86_64-linux-gnu" ldd "$unpacked/$program")
        if grep -q "not found" <<<"$listed"; then
            log "$program: a library is missing: $listed"; exit 1
        fi
        # "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" and the loader,
        # "/lib64/ld-linux-x86-64.so.2 (0x...)"
        for library in $(sed -n -e 's/.*=> \(\/[^ ]*\) (0x.*/\1/p' \
                                -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' <<<"$listed"); do
            local target=${library#"$unpacked"}
            mkdir -p "$root$(dirname "$target")"
            cp -L "$library" "$root$target"
        done
    done
}

write_init() {
    cat >"$1/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
exec >/dev/console 2>&1 </dev/null
. /etc/guest-functions
say boot
while read -r module; do insmod "/lib/modules/$module"; done </etc/module-order
# The loopback: a guest reaches its own addresses through it (Tempest's scenario tests ping
# a guest's fixed IP from the guest itself).
ip link set lo up
# The boot disk's FAT partition (the one FAT filesystem), writable at /persist: what is
# written there is in the disk, so a snapshot of it (and a server booted from that) keeps
# it (Tempest's test_snapshot_pattern writes its timestamp there: [scenario] target_dir).
mkdir -p /persist
for device in /sys/class/block/*[0-9]; do
    mount -t vfat -o rw "/dev/${device##*/}" /persist 2>/dev/null && break
done

# DHCP in the background so the lease is renewed while the guest stays up.
# Its pid file where Tempest's scenario tests look for it (they renew the lease with
# `kill -USR1 $(cat /var/run/udhcpc.eth0.pid)`, [scenario] dhcp_client = udhcpc).
udhcpc -f -i eth0 -s /etc/udhcpc.script -t 60 -T 1 -A 1 -O staticroutes \
    -x hostname:etcd-compute-guest -p /var/run/udhcpc.eth0.pid &
# The SSH host key, made while the lease is awaited.
dropbearkey -t ed25519 -f /etc/dropbear/host_key_ed25519 >/etc/dropbear/host_key.out 2>&1 &
host_key_job=$!
for _ in $(seq 120); do
    address=$(ip -4 -o addr show dev eth0 2>/dev/null | sed -n 's/.* inet \([0-9.]*\).*/\1/p')
    [ -n "$address" ] && break
    sleep 0.5
done
say "ip=${address:-none}"

# NoCloud config drive: the iso9660 filesystem that holds meta-data.
mkdir -p /cidata
for _ in $(seq 20); do
    for device in /sys/class/block/*; do
        mount -t iso9660 -o ro "/dev/${device##*/}" /cidata 2>/dev/null || continue
        [ -f /cidata/meta-data ] && break 2
        umount /cidata
    done
    sleep 0.5
done
if [ -f /cidata/meta-data ]; then
    id=$(sed -n "s/^instance-id: *['\"]\{0,1\}\([^'\"]*\).*/\1/p" /cidata/meta-data)
    name=$(sed -n "s/^local-hostname: *['\"]\{0,1\}\([^'\"]*\).*/\1/p" /cidata/meta-data)
    say "configdrive instance-id=$id"
    say "configdrive user-data=$(head -n1 /cidata/user-data)"
else
    say "configdrive missing; block devices: $(cd /sys/class/block && echo *)"
fi

# Asked again while it may still come (no answer, an error status); not after a refusal
# or no route (status 2): nothing listens there (the tests' hypervisor hosts answer
# "closed" at once) or the guest has no network, and waiting will not change that.
for _ in $(seq 10); do
    id=$(metadata meta-data/instance-id)
    case $? in 0|2) break ;; esac
    sleep 1
done
say "metadata instance-id=${id:-none}"
say "metadata user-data=$([ -z "$id" ] || metadata user-data | head -n1)"  # none: not asked
# The hostname, as cloud-init sets it from local-hostname: the config drive's, else the
# metadata server's (asked only if it answered above).
if [ -z "${name:-}" ] && [ -n "$id" ]; then
    name=$(metadata meta-data/hostname 2>/dev/null | head -n1)
fi
[ -z "${name:-}" ] || hostname "$name"
say "hostname=$(hostname)"

# SSH for root with the instance's key: the config drive's, else the metadata server's
# (asked only if it answered above). No key, no authorized key: no one logs in.
keys=$(configdrive_keys /cidata/meta-data 2>/dev/null)
if [ -z "$keys" ] && [ -n "$id" ]; then
    keys=$(metadata meta-data/public-keys/0/openssh-key 2>/dev/null)
fi
mkdir -p -m 700 /root/.ssh
[ -z "$keys" ] || printf '%s\n' "$keys" >/root/.ssh/authorized_keys
if wait "$host_key_job"; then
    # -F: in the background here, not daemonized (its port is looked for below); -s: no
    # password logins.
    dropbear -F -s -p 22 -r /etc/dropbear/host_key_ed25519 -P /run/dropbear.pid &
    sshd=$!
    for _ in $(seq 100); do
        # /proc/net/tcp: 0.0.0.0:22 (hex 0016) in state LISTEN (0A).
        grep -q ' 00000000:0016 00000000:0000 0A ' /proc/net/tcp && break
        kill -0 "$sshd" 2>/dev/null || break
        usleep 20000
    done
fi
if grep -q ' 00000000:0016 00000000:0000 0A ' /proc/net/tcp; then
    say "sshd host-key=$(grep -o '^ssh-ed25519 [^ ]*' /etc/dropbear/host_key.out)"
    say "sshd ready keys=$(printf '%s' "$keys" | grep -c .)"
else
    cat /etc/dropbear/host_key.out  # dropbear's own complaint, if any, is above
    say "sshd failed"
fi
say ready

# A user-data script ("#!" on its first line) runs now, after the markers above.
if [ "$(head -c 2 /cidata/user-data 2>/dev/null)" = "#!" ]; then
    sh /cidata/user-data
    say "user-data script exit=$?"
fi
while true; do sleep 3600; done
EOF
    chmod 755 "$1/init"

    cat >"$1/etc/guest-functions" <<'EOF'
say() { echo "ETCD-COMPUTE-GUEST $*"; }

# busybox-static's wget crashes without glibc's NSS files; nc speaks plain HTTP/1.0.
# Status 2: refused or unreachable (nc's error, shown, says which), or no answer from a
# next hop of its own (a DHCP static route, as Neutron with OVN gives it: the network's
# metadata port, which OVN answers ARP for, and behind which no agent listens on a host
# that runs none; with an agent, haproxy accepts at once); 1: any other failure.
metadata() {
    mkdir -p /tmp
    response=$(printf 'GET /latest/%s HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n' "$1" \
        | nc -w 3 169.254.169.254 80 2>/tmp/metadata-error | tr -d '\r') || return 1
    if [ -s /tmp/metadata-error ]; then
        cat /tmp/metadata-error >&2
        grep -qE "refused|unreachable" /tmp/metadata-error && return 2
        via=$(ip route get 169.254.169.254 2>/dev/null | sed -n 's/.* via \([0-9.]*\).*/\1/p')
        router=$(ip route | sed -n 's/^default via \([0-9.]*\).*/\1/p')
        grep -q "timed out" /tmp/metadata-error && [ -n "$via" ] && [ "$via" != "$router" ] \
            && return 2
    fi
    case "$response" in "HTTP/1."?" 200"*) ;; *) return 1 ;; esac
    printf '%s\n' "$response" | sed '1,/^$/d'
}

# The public keys in a NoCloud meta-data file, one a line: the items of its
# `public-keys:` block list, as PyYAML writes them (etcd_compute/virt/configdrive.py):
# plain or single-quoted, a long one folded onto lines indented deeper.
configdrive_keys() {
    awk '
        /^public-keys:/ { inside = 1; next }
        inside && /^- / { if (key != "") print key; key = substr($0, 3); next }
        inside && /^ +[^ ]/ && key != "" { sub(/^ +/, ""); key = key " " $0; next }
        { inside = 0 }
        END { if (key != "") print key }
    ' "$1" | sed "s/^'\(.*\)'\$/\1/; s/''/'/g"
}
EOF

    # sudo, as Tempest's scenario tests run their commands (`sudo sh -c ...`, `sudo
    # mount ...`): root is the one user here, so it runs the command as it is.
    cat >"$1/bin/sudo" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
    case "$1" in -n|-E|-H|-i|-s) shift ;; -u) shift 2 ;; --) shift; break ;; *) break ;; esac
done
exec "$@"
EOF
    chmod 755 "$1/bin/sudo"

    cat >"$1/bin/metadata" <<'EOF'
#!/bin/sh
# metadata PATH: the body of http://169.254.169.254/latest/PATH (/etc/guest-functions).
. /etc/guest-functions
metadata "$@"
EOF
    chmod 755 "$1/bin/metadata"

    # root, the one user (see the header), with no password ("*"): public-key logins only.
    echo 'root:*:0:0:root:/root:/bin/sh' >"$1/etc/passwd"
    echo 'root:x:0:' >"$1/etc/group"
    mkdir -p -m 700 "$1/root"
    mkdir -p "$1/etc/dropbear" "$1/run" "$1/var"
    ln -s /run "$1/var/run"

    cat >"$1/etc/udhcpc.script" <<'EOF'
#!/bin/sh
case "$1" in
    deconfig) ip link set "$interface" up; ip -4 addr flush dev "$interface" ;;
    bound|renew)
        ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}"
        # Classless static routes (option 121: on Neutron with OVN, 169.254.169.254 via the
        # network's metadata port): when given, the router option is ignored (RFC 3442).
        if [ -n "${staticroutes:-}" ]; then
            set -- $staticroutes
            while [ $# -ge 2 ]; do
                if [ "$2" = 0.0.0.0 ]; then ip route replace "$1" dev "$interface"
                else ip route replace "$1" via "$2" dev "$interface"; fi 2>/dev/null
                shift 2
            done
        elif [ -n "${router:-}" ]; then
            route add default gw "${router%% *}" dev "$interface" 2>/dev/null
        fi
        # The subnet's DNS servers (Tempest's test_subnet_details reads them after a
        # renewal), written whole each time.
        for server in ${dns:-}; do echo "nameserver $server"; done >/etc/resolv.conf.new
        mv /etc/resolv.conf.new /etc/resolv.conf
        true ;;
esac
EOF
    chmod 755 "$1/etc/udhcpc.script"
}

build() {
    local kver=$1 output=$2 work
    work=$(mktemp -d)
    WORK_DIR=$work

    log "fetching linux-image-$kver"
    download "$work" "linux-image-$kver"
    dpkg-deb -x "$work"/linux-image-"$kver"_*.deb "$work/kernel"
    local modules_dir=$work/kernel/lib/modules/$kver
    depmod -b "$work/kernel" "$kver"

    log "making the initramfs"
    local root=$work/initramfs
    mkdir -p "$root"/{bin,dev,proc,sys,etc,lib/modules}
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
    done
    module_load_order "$modules_dir" $MODULES >"$root/etc/module-order"
    while read -r module; do
        mkdir -p "$root/lib/modules/$(dirname "$module")"
        cp "$modules_dir/$module" "$root/lib/modules/$module"
    done <"$root/etc/module-order"
    log "fetching $SSH_PACKAGES"
    mkdir -p "$work/ssh"
    download "$work/ssh" $SSH_PACKAGES
    for deb in "$work"/ssh/*.deb; do dpkg-deb -x "$deb" "$work/ssh/unpacked"; done
    install_programs "$root" "$work/ssh/unpacked" $SSH_PROGRAMS
    install_programs "$root" "" $MACHINE_PROGRAMS
    write_init "$root"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -9) >"$work/initrd.gz"

    log "making the disk"
    # 1 MiB for the MBR and alignment, then a bootable 48 MiB FAT partition.
    local partition_offset=$((1024 * 1024)) partition_mib=48
    truncate -s $((partition_offset + partition_mib * 1024 * 1024)) "$work/disk.raw"
    echo "start=2048, type=6, bootable" | sfdisk -q "$work/disk.raw"
    dd if=/usr/lib/syslinux/mbr/mbr.bin of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
    local fat="$work/disk.raw@@$partition_offset"
    mformat -i "$fat" -T $((partition_mib * 2048)) -h 64 -s 32 -H 2048 -v GUEST ::
    syslinux --offset "$partition_offset" --install "$work/disk.raw"
    # mitigations=off, cryptomgr.notests: a test guest runs nothing but our script, and
    # under TCG the CPU-bug workarounds and the crypto self-tests cost ~0.25 s of its boot.
    cat >"$work/syslinux.cfg" <<EOF
DEFAULT linux
TIMEOUT 0
PROMPT 0
LABEL linux
  KERNEL vmlinuz
  INITRD initrd.gz
  APPEND console=ttyS0 quiet panic=5 rdinit=/init mitigations=off cryptomgr.notests
EOF
    mcopy -i "$fat" "$work/kernel/boot/vmlinuz-$kver" ::vmlinuz
    mcopy -i "$fat" "$work/initrd.gz" ::initrd.gz
    mcopy -i "$fat" "$work/syslinux.cfg" ::syslinux.cfg
    qemu-img convert -q -f raw -O qcow2 "$work/disk.raw" "$output.tmp"
    mv "$output.tmp" "$output"
}

WORK_DIR=
trap '[ -z "$WORK_DIR" ] || rm -rf "$WORK_DIR"' EXIT

main() {
    [ "$(id -u)" -eq 0 ] || { log "must run as root (it installs packages)"; exit 1; }
    install_packages
    mkdir -p "$CACHE_DIR"
    exec 9>"$CACHE_DIR/.lock"
    flock 9  # one build at a time; later runs find the cached image
    local kver key output
    kver=$(kernel_version)
    key=$(cat "${BASH_SOURCE[0]}" <(echo "$kver") | sha256sum | cut -c1-16)
    output=$CACHE_DIR/guest-$key.qcow2
    if [ ! -f "$output" ]; then
        build "$kver" "$output"
        log "built $output"
    fi
    # Each run marks its image used; others' go after a day unused (not at once: another
    # checkout's tests, with another version of this script, may be booting theirs now).
    touch "$output"
    find "$CACHE_DIR" -maxdepth 1 -name 'guest-*.qcow2' ! -path "$output" -mmin +1440 -delete
    ln -sfn "$(basename "$output")" "$CACHE_DIR/test-guest.qcow2"
    echo "$output"
}

# Sourced (tests: `write_init DIR` alone), it defines its functions and does nothing.
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
