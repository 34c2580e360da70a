#!/usr/bin/env bash
# Set up a free-threaded CPython 3.13 ("3.13t", GIL disabled) with this package installed.
#
#   tools/build_freethreaded.sh        (what `make freethreaded` runs)
#
# Progress goes to stderr; the last line on stdout is the path of the environment's
# interpreter ($FT_CACHE/venv/bin/python), so scripts can do PY=$(tools/build_freethreaded.sh | tail -1).
#
# 1. The base interpreter: $FT_PYTHON if set, else a working free-threaded `python3.13t` on PATH,
#    else one built here (cached): CPython 3.13 source from Debian's archive (trixie, through a
#    temporary sources list and lists dir, so the system's apt state is left alone), upstream
#    source only, `./configure --disable-gil --without-ensurepip`, `make -j`, `make altinstall`.
#    About 3-4 minutes on 2 cores; missing -dev packages are installed with apt-get when root.
#
# The Debian mirror (needed only when the source must be downloaded) is the machine's own:
#   FT_DEBIAN_MIRROR  if set, used as is (e.g. a local mirror's URL ending in /debian);
#   otherwise the first Debian archive entry of apt's configuration, in apt's reading order:
#   $FT_APT_ETC/sources.list (one-line entries), then $FT_APT_ETC/sources.list.d/ in name order
#   (*.list one-line entries, *.sources deb822 stanzas). An entry counts when it is enabled,
#   of type deb or deb-src, has the component main, a suite not ending in -security, and a URI
#   whose path ends in /debian (the archive's standard directory; debian-security,
#   debian-debug and debian-ports are other archives). No entry: the script stops and asks
#   for FT_DEBIAN_MIRROR.
#   FT_APT_ETC        apt's configuration directory to read (default /etc/apt; for tests).
#   FT_DEBIAN_SUITE   the suite to take python3.13's source from (default trixie).
#   tools/build_freethreaded.sh --print-debian-mirror   prints the mirror it would use, and
#                     where it came from on stderr, and exits (nothing is built or changed).
# 2. The environment: a venv of that interpreter in $FT_CACHE/venv, pip bootstrapped from the
#    pip wheel, the dependencies of pyproject.toml (runtime + [test] + [mpi]) as binary wheels only
#    (no sdist builds: numpy must come as a cp313t wheel), and this package installed editable
#    (redone on every run; cheap). Finally: the GIL must still be off after importing all of it.
#
# Caches (never required: everything is rebuilt when missing or broken):
#   FT_CACHE        per checkout, default <repo>/.cache/freethreaded (the venv)
#   FT_BUILD_CACHE  per machine, default ${XDG_CACHE_HOME:-~/.cache}/parallel_autograd/freethreaded
#                   (downloads, the built interpreter under cpython-<version>/, the dependencies'
#                   wheels under wheels/), shared by
#                   every checkout on the machine so CI's fresh clones reuse it.
set -euo pipefail
shopt -s inherit_errexit  # errexit inside $(...) too (the build runs in one)

log() { printf '[freethreaded] %s\n' "$*" >&2; }
die() { printf '[freethreaded] ERROR: %s\n' "$*" >&2; exit 1; }

# ---- the Debian mirror, from apt's own configuration ---------------------------------------
# apt's source files in apt's reading order: sources.list, then sources.list.d/ by name.
apt_source_files() {
    local etc=${FT_APT_ETC:-/etc/apt} f
    [ -f "$etc/sources.list" ] && printf '%s\n' "$etc/sources.list"
    for f in "$etc"/sources.list.d/*; do
        case $f in
            *.list | *.sources) [ -f "$f" ] && printf '%s\n' "$f" ;;
        esac
    done
    return 0
}

# Prints "URI<TAB>file" for every Debian archive entry of the apt source file $1 (format
# from its name: *.sources is deb822, anything else one-line), in file order.
debian_entries() {
    local fmt=line
    case $1 in *.sources) fmt=deb822 ;; esac
    awk -v fmt="$fmt" -v file="$1" '
        function archive_uri(uri, suites, comps,   path, n, i, s, c, ok) {
            if (uri ~ /^cdrom:/) return ""
            sub(/\/+$/, "", uri)
            path = uri
            sub(/^[A-Za-z0-9+.-]+:\/\/[^\/]*/, "", path)   # drop scheme://host
            if (path !~ /(^|\/)debian$/) return ""
            n = split(suites, s, /[ \t]+/)
            for (i = 1; i <= n; i++) if (s[i] ~ /-security$/) return ""
            n = split(comps, c, /[ \t]+/)
            ok = 0
            for (i = 1; i <= n; i++) if (c[i] == "main") ok = 1
            return ok ? uri : ""
        }
        function emit(uris, suites, comps,   n, i, u, r) {
            n = split(uris, u, /[ \t]+/)
            for (i = 1; i <= n; i++) {
                r = archive_uri(u[i], suites, comps)
                if (r != "") printf "%s\t%s\n", r, file
            }
        }
        # ---- one-line format: deb [options] uri suite component...
        fmt == "line" {
            sub(/#.*/, "")
            if ($1 != "deb" && $1 != "deb-src") next
            i = 2
            if ($i ~ /^\[/) {                   # options, possibly spread over several words
                while (i <= NF && $i !~ /\]$/) i++
                i++
            }
            uri = $i; suite = $(i + 1); comps = ""
            for (j = i + 2; j <= NF; j++) comps = comps " " $j
            emit(uri, suite, comps)
            next
        }
        # ---- deb822: stanzas separated by blank lines; "Field: value", continuation
        # lines start with white space, comment lines with #.
        function flush() {
            if (types ~ /(^|[ \t])deb(-src)?([ \t]|$)/ && tolower(enabled) != "no")
                emit(uris, suites, comps)
            types = uris = suites = comps = enabled = field = ""
        }
        fmt == "deb822" && /^[ \t]*$/ { flush(); next }
        fmt == "deb822" && /^#/ { next }
        fmt == "deb822" && /^[ \t]/ {            # continuation of the previous field
            v = $0; sub(/^[ \t]+/, "", v)
            if (field == "types") types = types " " v
            else if (field == "uris") uris = uris " " v
            else if (field == "suites") suites = suites " " v
            else if (field == "components") comps = comps " " v
            next
        }
        fmt == "deb822" {
            field = tolower($0); sub(/:.*/, "", field)
            v = $0; sub(/^[^:]*:[ \t]*/, "", v); sub(/[ \t]+$/, "", v)
            if (field == "types") types = v
            else if (field == "uris") uris = v
            else if (field == "suites") suites = v
            else if (field == "components") comps = v
            else if (field == "enabled") enabled = v
            next
        }
        END { if (fmt == "deb822") flush() }
    ' "$1"
}

# Sets DEBIAN_MIRROR: $FT_DEBIAN_MIRROR, else the first Debian archive entry apt reads.
resolve_debian_mirror() {
    if [ -n "${FT_DEBIAN_MIRROR:-}" ]; then
        DEBIAN_MIRROR=${FT_DEBIAN_MIRROR%/}
        log "Debian mirror $DEBIAN_MIRROR (from FT_DEBIAN_MIRROR)"
        return 0
    fi
    local etc=${FT_APT_ETC:-/etc/apt} f entry=""
    while IFS= read -r f; do
        entry=$(debian_entries "$f" | head -1)
        [ -n "$entry" ] && break
    done < <(apt_source_files)
    if [ -z "$entry" ]; then
        die "no Debian archive mirror found in apt's configuration ($etc/sources.list," \
            "$etc/sources.list.d/*.list, $etc/sources.list.d/*.sources: an enabled deb or" \
            "deb-src entry with component main whose URI ends in /debian). Set FT_DEBIAN_MIRROR" \
            "to a Debian mirror's URL, e.g. FT_DEBIAN_MIRROR=https://<mirror host>/debian"
    fi
    DEBIAN_MIRROR=${entry%%$'\t'*}
    log "Debian mirror $DEBIAN_MIRROR (from ${entry#*$'\t'})"
}

if [ "${1:-}" = "--print-debian-mirror" ]; then
    resolve_debian_mirror
    printf '%s\n' "$DEBIAN_MIRROR"
    exit 0
elif [ $# -gt 0 ]; then
    die "unknown argument: $1 (the only option is --print-debian-mirror)"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FT_CACHE=${FT_CACHE:-$ROOT/.cache/freethreaded}
mkdir -p "$FT_CACHE"
FT_CACHE=$(cd "$FT_CACHE" && pwd)
FT_BUILD_CACHE=${FT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/parallel_autograd/freethreaded}
mkdir -p "$FT_BUILD_CACHE"
FT_BUILD_CACHE=$(cd "$FT_BUILD_CACHE" && pwd)

DEBIAN_SUITE=${FT_DEBIAN_SUITE:-trixie}
SRC_PACKAGE=python3.13
# Header packages for the stdlib modules we need: ssl + zlib (pip), ctypes (threadpoolctl),
# bz2 + lzma (tarfile/shutil archives), sqlite3 (cheap, commonly expected).
DEV_PACKAGES=(libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev)
REQUIRED_MODULES="ssl, zlib, ctypes, bz2, lzma, sqlite3, venv"

VENV=$FT_CACHE/venv
VPY=$VENV/bin/python

# Succeeds if $1 is a free-threaded CPython whose GIL is off at startup.
is_ft_python() {
    [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || return 1
    env -u PYTHON_GIL "$1" -c '
import sys, sysconfig
assert sysconfig.get_config_var("Py_GIL_DISABLED"), "not a free-threaded build"
assert not sys._is_gil_enabled(), "GIL enabled"
assert sys.version_info[:2] >= (3, 13)
' >/dev/null 2>&1
}

# Serialize concurrent runs (two checkouts building the interpreter at once, or two
# `make` invocations on the same checkout).
exec 8>"$FT_BUILD_CACHE/.lock"
flock 8
exec 9>"$FT_CACHE/.lock"
flock 9

# ---- 1. the base interpreter -------------------------------------------------------------
ensure_dev_packages() {
    local missing=() p
    for p in "${DEV_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    command -v gcc >/dev/null || missing+=(gcc)
    command -v make >/dev/null || missing+=(make)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v xz >/dev/null || missing+=(xz-utils)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        die "missing build dependencies: ${missing[*]} (run: sudo apt-get install ${missing[*]})"
    fi
    log "installing build dependencies: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >&2
}

# Downloads python3.13's source package from Debian (cached); prints the orig tarball path.
fetch_source() (
    dl=$FT_BUILD_CACHE/downloads
    orig=$(ls "$dl"/${SRC_PACKAGE}_*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | sort -V | tail -1 || true)
    if [ -n "$orig" ] && xz -t "$orig" 2>/dev/null; then
        log "using cached source $orig"
        echo "$orig"
        exit 0
    fi
    resolve_debian_mirror  # stops here, before any download, if there is none
    apt_dir=$(mktemp -d "$FT_BUILD_CACHE/apt.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$apt_dir'" EXIT
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dl.tmp"
    echo "deb-src $DEBIAN_MIRROR $DEBIAN_SUITE main" >"$apt_dir/sources.list"
    opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
                -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
                -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=true" -qq)
    log "apt-get update ($DEBIAN_SUITE sources, temporary lists in $apt_dir)"
    apt-get "${opts[@]}" update >&2
    log "apt-get source --download-only $SRC_PACKAGE"
    rm -rf "$dl.tmp" && mkdir -p "$dl.tmp"
    (cd "$dl.tmp" && apt-get "${opts[@]}" source --download-only "$SRC_PACKAGE" >&2)
    rm -rf "$dl" && mv "$dl.tmp" "$dl"
    orig=$(ls "$dl"/${SRC_PACKAGE}_*.orig.tar.* | grep -v '\.asc$' | sort -V | tail -1)
    [ -n "$orig" ] || die "no orig tarball downloaded"
    echo "$orig"
)

build_cpython() (
    ensure_dev_packages
    orig=$(fetch_source)
    version=$(basename "$orig" | sed -E 's/^[^_]+_([0-9.]+)\.orig.*/\1/')
    prefix=$FT_BUILD_CACHE/cpython-$version
    if is_ft_python "$prefix/bin/python3.13t" && [ -e "$prefix/.complete" ]; then
        echo "$prefix/bin/python3.13t"
        exit 0
    fi
    log "building free-threaded CPython $version into $prefix (a few minutes)"
    rm -rf "$prefix"
    work=$(mktemp -d "$FT_BUILD_CACHE/build.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    tar -xf "$orig" -C "$work"
    src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
    [ -x "$src/configure" ] || die "no configure script in $orig"
    jobs=$(nproc 2>/dev/null || echo 2)
    t0=$SECONDS
    (
        cd "$src"
        # OPT: -O2 without -g (configure's default is "-g -O3") takes 25% less CPU to build.
        ./configure --disable-gil --without-ensurepip --disable-test-modules \
            --prefix="$prefix" OPT="${FT_OPT:--DNDEBUG -O2}" >"$work/configure.log" 2>&1 ||
            { tail -40 "$work/configure.log" >&2; exit 1; }
        make -j"$jobs" >"$work/make.log" 2>&1 || { tail -60 "$work/make.log" >&2; exit 1; }
        # Modules the build could not make (missing headers) are listed here; fail if we need them.
        grep -A3 -E 'necessary bits to build these optional modules|Failed to build these modules' \
            "$work/make.log" >&2 || true
        make altinstall >"$work/install.log" 2>&1 || { tail -40 "$work/install.log" >&2; exit 1; }
    ) || die "CPython build failed (logs above)"
    log "built in $((SECONDS - t0)) s"
    env -u PYTHON_GIL "$prefix/bin/python3.13t" -c "import $REQUIRED_MODULES" ||
        die "the built interpreter lacks one of: $REQUIRED_MODULES"
    is_ft_python "$prefix/bin/python3.13t" || die "the built interpreter is not free-threaded"
    touch "$prefix/.complete"
    echo "$prefix/bin/python3.13t"
)

find_base_python() {
    if [ -n "${FT_PYTHON:-}" ]; then
        is_ft_python "$FT_PYTHON" || die "FT_PYTHON=$FT_PYTHON is not a free-threaded CPython >= 3.13"
        command -v "$FT_PYTHON"
        return
    fi
    if command -v python3.13t >/dev/null 2>&1 && is_ft_python python3.13t &&
        env -u PYTHON_GIL python3.13t -c "import $REQUIRED_MODULES" 2>/dev/null; then
        log "using python3.13t from PATH: $(command -v python3.13t)"
        command -v python3.13t
        return
    fi
    local p
    for p in "$FT_BUILD_CACHE"/cpython-*/bin/python3.13t; do
        if [ -e "$(dirname "$(dirname "$p")")/.complete" ] && is_ft_python "$p"; then
            log "using cached build $p"
            echo "$p"
            return
        fi
    done
    build_cpython
}

# ---- 2. the environment ------------------------------------------------------------------
# The pip wheel, from the cache or downloaded with the host's pip; falls back to ensurepip's
# bundled wheel when there is neither.
pip_wheel() {
    local dir=$FT_BUILD_CACHE/wheels whl
    mkdir -p "$dir"
    whl=$(ls "$dir"/pip-*.whl 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$whl" ]; then
        local host
        for host in python3 python; do
            if command -v "$host" >/dev/null && "$host" -m pip --version >/dev/null 2>&1; then
                log "downloading the pip wheel with $host -m pip"
                "$host" -m pip download --quiet --disable-pip-version-check --no-deps \
                    --only-binary=:all: pip -d "$dir" >&2 && break
            fi
        done
        whl=$(ls "$dir"/pip-*.whl 2>/dev/null | sort -V | tail -1 || true)
    fi
    if [ -z "$whl" ]; then
        whl=$(ls "$(dirname "$(dirname "$BASE")")"/lib/python3.13t/ensurepip/_bundled/pip-*.whl \
            2>/dev/null | tail -1 || true)
    fi
    [ -n "$whl" ] || die "could not get a pip wheel (no host pip, no ensurepip)"
    echo "$whl"
}

requirements() {
    "$VPY" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    p = tomllib.load(f)["project"]
extras = p.get("optional-dependencies", {})
for r in p.get("dependencies", []) + extras.get("test", []) + extras.get("mpi", []):
    print(r)
print("setuptools>=64")  # for the editable install without build isolation
EOF
}

BASE=$(find_base_python)
log "base interpreter: $BASE ($(env -u PYTHON_GIL "$BASE" -VV | head -1))"

venv_ok() {
    [ -x "$VPY" ] && is_ft_python "$VPY" && "$VPY" -m pip --version >/dev/null 2>&1 &&
        [ "$(readlink -f "$VPY")" = "$(readlink -f "$(command -v "$BASE")")" ]
}
if ! venv_ok; then
    log "creating the venv $VENV"
    rm -rf "$VENV"
    env -u PYTHON_GIL "$BASE" -m venv --without-pip "$VENV"
    WHL=$(pip_wheel)
    log "bootstrapping pip from $(basename "$WHL")"
    "$VPY" "$WHL/pip" install --quiet --disable-pip-version-check --no-index "$WHL" >&2
fi

REQS=$(requirements)
mapfile -t REQ_ARRAY <<<"$REQS"
STAMP=$VENV/.requirements
# The wheels are kept per machine ($FT_BUILD_CACHE/wheels, like the interpreter): a fresh
# checkout installs from them without the index (seconds), and downloads into them only what
# they lack (measured: a fresh clone's dependency install took 7-11 minutes from the index
# on a loaded 2-core machine, 2026-11-28).
WHEELS=$FT_BUILD_CACHE/wheels
pip_deps() {
    env -u PYTHON_GIL "$VPY" -m pip "$@" --quiet --disable-pip-version-check \
        --only-binary=:all: "${REQ_ARRAY[@]}" >&2
}
if [ "$(cat "$STAMP" 2>/dev/null)" != "$REQS" ]; then
    log "installing (binary wheels only): $(echo "$REQS" | tr '\n' ' ')"
    rm -f "$STAMP"
    mkdir -p "$WHEELS"
    if ! pip_deps install --no-index --find-links "$WHEELS" 2>/dev/null; then
        log "downloading the wheels the cache $WHEELS lacks"
        pip_deps download --dest "$WHEELS" || die "pip download of the dependencies failed"
        pip_deps install --no-index --find-links "$WHEELS" ||
            die "pip install of the dependencies failed"
    fi
    echo "$REQS" >"$STAMP"
fi

log "installing parallel_autograd (editable) from $ROOT"
(cd "$ROOT" && env -u PYTHON_GIL PYTHONWARNINGS=ignore "$VPY" -m pip install --quiet --disable-pip-version-check \
    --no-deps --no-build-isolation --no-index -e . >&2) || die "installing the package failed"

# Every extension we load must support free-threading, or CPython re-enables the GIL and
# says which module did it (a RuntimeWarning, shown here). Run outside the checkout so the
# package comes from the installed (editable) distribution.
CHECK_PY='
import glob, os, sys
import numpy, threadpoolctl, pytest, pytest_timeout, parallel_autograd
tags = [line.split(":", 1)[1].strip()
        for d in glob.glob(os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)),
                                        "numpy-*.dist-info"))
        for line in open(os.path.join(d, "WHEEL")) if line.startswith("Tag:")]
print(f"numpy {numpy.__version__} from wheel {tags}")
if not any(t.split("-")[1].endswith("t") for t in tags):
    sys.exit("numpy is not a free-threaded (cp3XXt) wheel")
if sys._is_gil_enabled():
    sys.exit("the GIL was re-enabled by an import (see the RuntimeWarning above)")
print("imports ok, GIL disabled")
'
status=0
CHECK=$(cd "$FT_CACHE" && env -u PYTHON_GIL "$VPY" -W always::RuntimeWarning -c "$CHECK_PY" 2>&1) ||
    status=$?
printf '%s\n' "$CHECK" | sed 's/^/[freethreaded] /' >&2
[ "$status" -eq 0 ] || die "the free-threaded environment check failed"

echo "$VPY"
