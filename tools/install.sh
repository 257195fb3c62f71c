#!/usr/bin/env bash
# Install what etcd-compute needs on a Debian-like machine, as root.
# Idempotent and quiet: packages already there and unchanged requirements are skipped.
#   tools/install.sh           everything make demo and make up need
#   tools/install.sh tempest   that, and Tempest in .venv-tempest (make tempest, make test)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "==> $*"; }
die() { echo "error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: it installs Debian packages (try: sudo make $*)"
[ -f /etc/debian_version ] && command -v apt-get >/dev/null \
  || die "needs Debian 12 or a Debian-like system with apt-get"

# etcd and libvirt are the motors; postgresql backs the multi-worker Placement tests
# and benchmarks; dnsmasq/iptables serve libvirt's NAT network; mtools, syslinux,
# dosfstools, busybox, cpio, kmod and fdisk build the offline test guest (installed here,
# not by the guest's build in the middle of a test run); openssh-client logs in to it; novnc
# is the console proxy's page (its files only: the proxy is ours, on websockify from PyPI).
PACKAGES="etcd-server etcd-client libvirt-daemon-system qemu-system-x86 qemu-utils
  libvirt-dev pkg-config postgresql dnsmasq-base iptables iproute2 mtools syslinux
  syslinux-common dosfstools busybox-static cpio kmod fdisk openssh-client python3-venv
  python3-dev gcc novnc"
# Another apt (an unattended upgrade, a second make) holding dpkg's lock is waited for,
# not a failure.
APT_LOCK_WAIT="-o DPkg::Lock::Timeout=600"
# missing_of PACKAGE...: those of them not installed, each after a space.
missing_of() {
  local package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || printf ' %s' "$package"
  done
}
missing=$(missing_of $PACKAGES)
if [ -n "$missing" ]; then
  say "installing Debian packages:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get $APT_LOCK_WAIT install -y -qq $missing >/tmp/etcd-compute-apt.log 2>&1 \
    || die "apt-get install failed; see /tmp/etcd-compute-apt.log"
fi

# Prometheus scrapes the daemons' metrics in the tests, which start their own on a free
# port. Debian's package would also run one as a system service on every interface (and
# recommends the node exporter, another): installed here as a tool only, without its
# recommends, its service stopped and disabled at once. One that was there before is left
# as it is.
if ! dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "install ok installed"; then
  say "installing Debian package: prometheus (for the tests; its service stays off)"
  [ -n "$missing" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get $APT_LOCK_WAIT install -y -qq --no-install-recommends prometheus \
    >>/tmp/etcd-compute-apt.log 2>&1 || die "apt-get install failed; see /tmp/etcd-compute-apt.log"
  if [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi

# Neutron with ML2/OVN (the guests' networks): OVN's northbound and southbound databases
# and ovn-northd (ovn-central), Open vSwitch and ovn-controller for the hosts (ovn-host),
# MariaDB for Neutron's database (its migrations run on MySQL/MariaDB only), haproxy (OVN's
# metadata agent). The tests run their own instances of each (run dirs, sockets and
# loopback ports of their own, stopped by pid: tools/local_services/). Debian's packages
# would also start their system services (a MariaDB on port 3306, OVN's databases and
# ovn-northd, an ovsdb-server and ovs-vswitchd, ovn-controller, haproxy), which nothing here
# uses and which would hold the machine's names (/var/run/ovn, /var/run/openvswitch, the
# kernel datapath): installed without their recommends, their services stopped and disabled
# at once. A package that was there before is left as it is, with its services.
NETWORK_PACKAGES="openvswitch-switch ovn-central ovn-host mariadb-server haproxy"
# services_of PACKAGE: the system services PACKAGE installs (systemd units; sysvinit scripts).
services_of() {
  case $1 in
    openvswitch-switch) echo "openvswitch-switch ovs-vswitchd ovsdb-server" ;;
    ovn-central) echo "ovn-central ovn-northd ovn-ovsdb-server-nb ovn-ovsdb-server-sb" ;;
    ovn-host) echo "ovn-host ovn-controller" ;;
    mariadb-server) echo "mariadb" ;;
    haproxy) echo "haproxy" ;;
  esac
}
network_missing=$(missing_of $NETWORK_PACKAGES)
if [ -n "$network_missing" ]; then
  say "installing Debian packages:$network_missing (for Neutron on OVN; their services stay off)"
  [ -n "$missing" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get $APT_LOCK_WAIT install -y -qq --no-install-recommends $network_missing \
    >>/tmp/etcd-compute-apt.log 2>&1 || die "apt-get install failed; see /tmp/etcd-compute-apt.log"
  # ovn-host's first: ovn-controller talks to Open vSwitch's ovsdb-server.
  for package in $(echo $network_missing | tr ' ' '\n' | sort -r); do
    for service in $(services_of "$package"); do
      if [ -d /run/systemd/system ]; then
        systemctl disable --now "$service.service" >/dev/null 2>&1 || true
      elif [ -x "/etc/init.d/$service" ]; then
        "/etc/init.d/$service" stop >/dev/null 2>&1 || true
        update-rc.d "$service" disable >/dev/null 2>&1 || true
      fi
    done
  done
fi

# The dashboard's browser tests (tests/virt/test_dashboard_in_a_browser_vm.py): Debian's
# Chromium, run headless, and its WebDriver (Selenium drives it; nothing is downloaded at
# run time). Without their recommends (a desktop's fonts, themes and sound).
BROWSER_PACKAGES="chromium chromium-driver"
browser_missing=$(missing_of $BROWSER_PACKAGES)
if [ -n "$browser_missing" ]; then
  say "installing Debian packages:$browser_missing (the dashboard's browser tests)"
  [ -n "$missing" ] || [ -n "$network_missing" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get $APT_LOCK_WAIT install -y -qq --no-install-recommends $browser_missing \
    >>/tmp/etcd-compute-apt.log 2>&1 || die "apt-get install failed; see /tmp/etcd-compute-apt.log"
fi

# The guest filter's cap on metadata connections is an iptables rule on the guest's
# bridge port: iptables sees bridged packets only with br_netfilter and this sysctl.
modprobe br_netfilter 2>/dev/null || true
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" != 1 ]; then
  say "net.bridge.bridge-nf-call-iptables=1 (for the guest filter's metadata cap)"
  sysctl -q -w net.bridge.bridge-nf-call-iptables=1 \
    || echo "warning: cannot set net.bridge.bridge-nf-call-iptables (no br_netfilter?):" \
       "the guest filter's metadata cap will have no effect" >&2
fi

PYTHON=${PYTHON:-python3}
# venv DIR REQUIREMENTS...: create DIR and install, unless the requirements are unchanged.
venv() {
  local dir=$1; shift
  local stamp="$dir/.requirements.sha256"
  local want; want=$(cat "$@" pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  say "installing Python packages into $dir"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check --upgrade pip >/dev/null
  local args=()
  for file in "$@"; do args+=(-r "$file"); done
  "$dir/bin/pip" install -q --disable-pip-version-check "${args[@]}" \
    || die "pip install into $dir failed"
  echo "$want" > "$stamp"
}
# The services' virtualenvs (Placement, Keystone, Glance, the clients, Tempest) hold nothing
# of this checkout: each is built once per requirements digest (and Python) under
# $ETCD_COMPUTE_CACHE (default ~/.cache/etcd-compute) and linked here, so another clone
# (a CI run's fresh one) links in a second instead of installing for minutes. A virtualenv is
# not relocatable (its scripts name its path), so it is built where it stays. An up-to-date
# directory here (or a link made by hand) is kept; ETCD_COMPUTE_CACHE= (empty) builds here.
# .venv is not cached: it holds this checkout's editable install (the console scripts).
CACHE=${ETCD_COMPUTE_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-compute}
# cache_path DIR FILES...: where the cache keeps DIR's virtualenv for FILES and this Python.
cache_path() {
  local dir=$1; shift
  local python; python=$(readlink -f "$(command -v "$PYTHON")")
  local key; key=$({ cat "$@"; echo "$python"; "$PYTHON" -VV; } | sha256sum | cut -c1-16)
  echo "$CACHE/venvs/${dir#.}-$key"
}
# build_once TARGET REQUIREMENTS...: the cached virtualenv TARGET, unless it is complete.
build_once() {
  local target=$1; shift
  mkdir -p "$CACHE/venvs"
  (
    flock 9  # another checkout may be building the same one
    if [ ! -f "$target/.complete" ]; then
      rm -rf "$target"  # an interrupted build
      venv "$target" "$@"
      touch "$target/.complete"
    fi
  ) 9>"$target.lock"
}
cached_venv() {
  local dir=$1; shift
  local want; want=$(cat "$@" pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -z "$CACHE" ] || { [ -x "$dir/bin/python" ] && [ ! -L "$dir" ] \
      && [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ]; }; then
    venv "$dir" "$@"
    return
  fi
  local target; target=$(cache_path "$dir" "$@")
  if [ -L "$dir" ] && [ -f "$target/.complete" ] && [ "$(readlink "$dir")" = "$target" ]; then
    return
  fi
  if [ -L "$dir" ] && [ -x "$dir/bin/python" ] \
      && [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ]; then
    return  # linked by hand to an up-to-date virtualenv (a worktree's to its main's)
  fi
  build_once "$target" "$@"
  rm -rf "$dir"  # an out-of-date directory or link (rm removes a link, not its target)
  ln -s "$target" "$dir"
  say "$dir -> $target"
}
# .venv holds this checkout's editable install, so it cannot be shared; but what it installs
# from PyPI can: a fresh clone copies a cached virtualenv of the same requirements (pip's
# resolution against the index took ~10 s a clone) and points its scripts at itself.
copied_venv() {
  local dir=$1; shift
  local want; want=$(cat "$@" pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -z "$CACHE" ] || { [ -x "$dir/bin/python" ] \
      && [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ]; }; then
    venv "$dir" "$@"
    return
  fi
  # pyproject.toml too: it is in the stamp the copy is checked by (`want`).
  local source; source=$(cache_path "$dir" "$@" pyproject.toml)
  build_once "$source" "$@"
  local here; here="$(pwd)/$dir"
  rm -rf "$dir" "$dir.partial"
  cp -a "$source" "$dir.partial"
  rm -f "$dir.partial/.complete"
  # The scripts name their interpreter, and activate its directory, by absolute path.
  grep -rlI --null -F "$source" "$dir.partial/bin" "$dir.partial/pyvenv.cfg" \
    | xargs -0 -r sed -i "s|$source|$here|g"
  mv "$dir.partial" "$dir"
  say "$dir copied from $source"
}
copied_venv .venv requirements-test.txt
if [ ! -x .venv/bin/ecompute ] || [ ! -x .venv/bin/eschedule ]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -e . >/dev/null 2>&1 \
    || die "pip install -e . failed (the ecompute/eschedule console scripts)"
fi
# Placement is a separate service with many dependencies of its own.
cached_venv .venv-placement requirements-placement.txt
# Keystone (identity) and Glance (images): the cloud's own services, each in its own
# virtualenv; the `openstack` command line in a third (it pulls in many packages).
cached_venv .venv-keystone requirements-keystone.txt
cached_venv .venv-glance requirements-glance.txt
cached_venv .venv-clients requirements-clients.txt
# Ansible and its openstack.cloud collection, for the test of an idempotent playbook (~0.6 GB:
# the `ansible` package bundles every collection it ships).
cached_venv .venv-ansible requirements-ansible.txt
# Neutron's API server with ML2/OVN (the guests' networks), on MariaDB.
cached_venv .venv-neutron requirements-neutron.txt
# Horizon (the dashboard), on Django, under gunicorn.
cached_venv .venv-horizon requirements-horizon.txt
# The documentation site's builder (make docs, which make test runs).
cached_venv .venv-docs requirements-docs.txt
# Tempest (the compute API's judge) only when asked: it is large and only the tests use it.
if [ "${1:-}" = tempest ]; then
  cached_venv .venv-tempest requirements-tempest.txt
  # Its scenario tests (make tempest SCENARIO=1) ping the guests' floating IPs with
  # `ping -c1 -w1 [-M do -s N]`: iputils' options, which busybox's ping lacks.
  ping_missing=$(missing_of iputils-ping)
  if [ -n "$ping_missing" ]; then
    say "installing Debian packages:$ping_missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get $APT_LOCK_WAIT install -y -qq --no-install-recommends $ping_missing \
      >>/tmp/etcd-compute-apt.log 2>&1 || die "apt-get install failed; see /tmp/etcd-compute-apt.log"
  fi
fi
