#!/usr/bin/env bash
# Builds every CUDA program on a machine with the toolchain (a cluster's login node, a CI box) and
# packs it, with everything it needs, into one archive to carry to a GPU machine that has only the
# driver, the CUDA runtime libraries and (optionally) PyTorch:
#     gpu_bundle/carry/gpu_bundle.tar.xz   (and MANIFEST.txt beside it: what is inside, and why)
# There, scripts/gpu_check.sh unpacks it and runs the GPU tests and benchmarks (docs/GPU_CHECK.md,
# "Checking a GPU machine without build tools").
#
# Usage, from the repository (any folder in it):
#     bash scripts/gpu_bundle.sh              build what changed, bundle, check the bundle
#     bash scripts/gpu_bundle.sh --no-build   bundle what is already built
#     bash scripts/gpu_bundle.sh --rehearse   then also run gpu_check.sh here, on a stand-in for the
#                                             bare machine: system libraries other than glibc's,
#                                             libstdc++ and the shell tools' are hidden (root + unshare)
# Environment: JOBS (make -j, default 2), GPU_ARCH (default 90a: H100 and H200), BUNDLE_EXTRA (more
# programs, named by their path in the default build, e.g. "build/test/test_nccl"),
# GPU_BUNDLE_LIMIT_MIB (default 64: the most the archive and the working tree may weigh together,
# for job systems that copy a working tree and a few files with each job; over it is an error).
# Exit status: 0 bundle complete; 2 bundle written, but some programs failed to build (listed, and
# left out); 1 no bundle (or it failed its checks).
#
# The bundle is a build of its own, in gpu_bundle/build (make's BUILD and BIN), so it never fights
# with the default build (which compiles for the card it finds, or without one sm_90a machine code
# and compute_80 PTX, and for this machine's CPU):
#   - device code for GPU_ARCH only, which halves the binaries;
#   - host code without -march=native (OPT=-O3): the GPU machine's CPU may lack this one's AVX-512;
#   - cpu/gemm.cpp dlopen()s OpenBLAS by the absolute path cpu/build.mk compiles in; this build names
#     it by its soname instead (CPU_BLAS_FLAGS), so the copy in the bundle is found on LD_LIBRARY_PATH.
# Programs keep their paths of the default build (build/test/kernels/cuda/test_X, dev/bin/cuda_X,
# ./train_gpt), so test/kernels/gpu_kernel_tests.sh and test/emu/gpu_vs_emu.sh run unchanged inside it.
#
# Libraries: every one that ldd names (for the programs, for OpenBLAS, which is dlopen()ed, and for
# MPI's plugins where a program links MPI) is copied, except
#   - glibc's (libc, libm, libdl, ...) and CUDA's (cudart, cuBLAS, cuBLASLt, NCCL, the driver): the
#     GPU machine has them with its driver, its toolkit and PyTorch; gpu_check.sh finds them there;
#   - nothing else, but the libraries every Linux image has in some version (libstdc++, libgcc_s,
#     zlib, ...) go to lib/common/, which gpu_check.sh puts on the path only if the machine's own
#     copies are missing or too old: system tools keep their own newer ones.
# MPI, only when a program links it (train_gpt does not so far): its libraries and plugins, not
# mpirun or orted: a one-GPU trainer runs as a single process (an MPI "singleton"), which with
# OMPI_MCA_ess_singleton_isolated=1 needs no daemon. Multi-process runs on one GPU are not worth
# the extra megabytes. Plugins for network fabrics (InfiniBand, libfabric, UCX, PSM) and OpenSHMEM
# are left out.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$(pwd)

mode_build=1 mode_rehearse=0
for arg in "$@"; do
    case $arg in
        --no-build) mode_build=0 ;;
        --rehearse) mode_rehearse=1 ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_bundle.sh: unknown argument '$arg' (try --help)" >&2; exit 1 ;;
    esac
done

JOBS=${JOBS:-2}
GPU_ARCH=${GPU_ARCH:-90a}
root=gpu_bundle              # everything of this script lives here (ignored by git)
build=$root/build            # make's BUILD for the bundle build; BIN is $build/bin
stage=$root/stage/gpu_bundle # the bundle's tree, as it is packed
carry=$root/carry            # what goes to the GPU machine
archive=$carry/gpu_bundle.tar.xz
log=$root/build.log
travel_limit=$((${GPU_BUNDLE_LIMIT_MIB:-64} * 1024 * 1024))  # archive + working tree

say() { printf '%s\n' "$*"; }
t_start=$(date +%s)
phase() { printf '== %s (at +%s s)\n' "$*" $(($(date +%s) - t_start)); }
die() { printf 'gpu_bundle.sh: %s\n' "$*" >&2; exit 1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc here: cannot build CUDA programs"
mkdir -p "$root" "$carry"

# ---- 1. make: the bundle's own build ------------------------------------------------------------

# A make variable's value as the Makefile computes it (printed by a rule added on the command line).
make_var() {
    local printer
    printer=$(mktemp)
    printf 'print-var-%%:\n\t@:$(info $($*))\n' >"$printer"
    make -s --no-print-directory "${make_vars[@]}" -f Makefile -f "$printer" "print-var-$1" 2>/dev/null
    rm -f "$printer"
}

make_vars=(BUILD="$build" BIN="$build/bin" GPU_ARCH="$GPU_ARCH" OPT=-O3)
# OpenBLAS by soname: take cpu/build.mk's flags and drop the folder from OPENBLAS_LIBRARY.
blas_flags=$(make_var CPU_BLAS_FLAGS)
openblas_path=$(printf '%s' "$blas_flags" | sed -n "s/.*OPENBLAS_LIBRARY='\"\([^\"]*\)\"'.*/\1/p")
if [ -n "$openblas_path" ]; then
    openblas_soname=$(basename "$openblas_path")
    make_vars+=("CPU_BLAS_FLAGS=${blas_flags/\"$openblas_path\"/\"$openblas_soname\"}")
fi

# The programs, by their path in the default build (= their path in the bundle).
programs=()
for f in test/kernels/test_*.cu; do [ -e "$f" ] && programs+=("build/test/kernels/cuda/$(basename "$f" .cu)"); done
for f in test/gpu/test_*.cu; do [ -e "$f" ] && programs+=("build/test/gpu/cuda/$(basename "$f" .cu)"); done
programs+=(build/test/emu_kernel_suite_cuda build/test/emu_kernel_suite)
for f in dev/cuda/*.cu; do [ -e "$f" ] && programs+=("dev/bin/cuda_$(basename "$f" .cu)"); done
[ -e dev/bench_step.cu ] && programs+=(dev/bin/bench_step)   # the training step split by op class
[ -e train_gpt.cu ] && programs+=(train_gpt)
programs+=(train_gpt_cpu generate)
for p in ${BUNDLE_EXTRA:-}; do programs+=("$p"); done

# Where the bundle build puts a program of the default build's path P: build/X -> $build/X, else
# (BIN-relative: dev/bin/..., train_gpt) $build/bin/P.
target_of() { case $1 in build/*) echo "$build/${1#build/}" ;; *) echo "$build/bin/$1" ;; esac; }

targets=()
for p in "${programs[@]}"; do targets+=("$(target_of "$p")"); done
if [ $mode_build -eq 1 ]; then
    phase "building ${#targets[@]} programs for sm_$GPU_ARCH in $build (make -j$JOBS; log: $log)"
    start=$(date +%s)
    nice -n 10 make -k -j"$JOBS" "${make_vars[@]}" "${targets[@]}" >"$log" 2>&1
    say "   make finished in $(($(date +%s) - start)) s"
fi

# A program goes in only if make says it is up to date: a failed rebuild never ships a stale binary.
built=() failed=()
for p in "${programs[@]}"; do
    t=$(target_of "$p")
    if [ -x "$t" ] && make -q "${make_vars[@]}" "$t" >/dev/null 2>&1; then built+=("$p"); else failed+=("$p"); fi
done
[ ${#built[@]} -gt 0 ] || die "nothing built (see $log)"
for p in "${failed[@]}"; do say "   NOT BUILT: $p (see $log)"; done

# ---- 2. the bundle's tree -----------------------------------------------------------------------
phase "gathering the bundle in $stage"
rm -rf "$root/stage" && mkdir -p "$stage/lib/common"

# Programs, without debug info (symbols stay, for readable backtraces).
for p in "${built[@]}"; do
    mkdir -p "$stage/$(dirname "$p")"
    if is_elf "$(target_of "$p")"; then
        strip --strip-debug -o "$stage/$p" "$(target_of "$p")" || die "strip failed on $p"
    else
        cp "$(target_of "$p")" "$stage/$p"
    fi
done

# The scripts gpu_check.sh runs, as they were when these programs were built (dev/gpt2_torch.py: the
# PyTorch reference and speed peer; dev/attention_torch.py: the attention benchmark's peer; both run
# with the GPU machine's PyTorch; test/train/check_trace.py: the timeline's checks).
for s in test/kernels/gpu_kernel_tests.sh test/emu/gpu_vs_emu.sh dev/gpt2_torch.py dev/attention_torch.py \
         test/train/check_trace.py; do
    [ -e "$s" ] && mkdir -p "$stage/$(dirname "$s")" && cp "$s" "$stage/$s"
done

# The built-in dataset and the tokenizer's decode table, for train_gpt and train_gpt_cpu.
data_files=(data/janeausten/janeausten_train.bin data/janeausten/janeausten_val.bin data/gpt2_tokenizer.bin)
if [ ! -e "${data_files[0]}" ] || [ ! -e "${data_files[1]}" ] || [ ! -e "${data_files[2]}" ]; then
    [ -x data/prepare ] || make data/prepare >>"$log" 2>&1
    data/prepare janeausten >>"$log" 2>&1 || say "   WARNING: data/prepare janeausten failed (see $log)"
fi
for f in "${data_files[@]}"; do
    if [ -e "$f" ]; then mkdir -p "$stage/$(dirname "$f")" && cp "$f" "$stage/$f"; else say "   WARNING: no $f"; fi
done

# Which libraries stay behind, and which go to lib/common (see the top of this file).
system_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-[a-z-]+|nvrtc|nvJitLink|cufft|curand|cusolver|cusparse|cudnn[a-z_]*|cupti|nvToolsExt|nvtx[0-9a-z_]*)\.so'
common_re='^(libstdc\+\+|libgcc_s|libz|liblzma|libzstd|libbz2|libcrypto|libssl|libpcre2-8|libudev|libsystemd|libselinux|libtinfo|libuuid|libexpat|libffi|libcap|libacl|libattr)\.so'
fabric_re='lib(fabric|ucp|ucs|uct|ucm|ibverbs|rdmacm|psm|psm2|psm_infinipath|infinipath|oshmem|nl-3|nl-route-3)\.so'

cuda_needed=()

# Copies into the bundle every library that ldd resolves for the given ELF files (ldd lists the
# whole closure), under the name the programs ask for.
bundle_libraries_of() {
    local f name arrow path rest
    for f in "$@"; do
        while read -r name arrow path rest; do
            [ "$arrow" = "=>" ] || continue
            if [[ $name =~ $system_re ]]; then continue; fi
            if [[ $name =~ $cuda_re ]] || [[ $path == /usr/local/cuda* ]]; then
                [[ " ${cuda_needed[*]} " == *" $name "* ]] || cuda_needed+=("$name")
                continue
            fi
            [ "$path" = "not" ] && die "$f needs $name, which is not found here either"
            local dest=$stage/lib/$name
            if [[ $name =~ $common_re ]]; then dest=$stage/lib/common/$name; fi
            [ -e "$dest" ] || cp -L "$path" "$dest" || die "cannot copy $path"
        done < <(ldd "$f" 2>/dev/null)
    done
}

elf_programs=()
for p in "${built[@]}"; do is_elf "$stage/$p" && elf_programs+=("$stage/$p"); done
bundle_libraries_of "${elf_programs[@]}"

# OpenBLAS: dlopen()ed by cpu/gemm.cpp, so ldd does not see it.
if [ -n "${openblas_path:-}" ]; then
    if grep -qa "$openblas_soname" "${elf_programs[@]}"; then
        cp -L "$openblas_path" "$stage/lib/$openblas_soname" || die "cannot copy $openblas_path"
        bundle_libraries_of "$stage/lib/$openblas_soname"
    fi
fi

# MPI, when a program links it: plugins (minus the fabrics), PMIx's plugins, the help texts.
mpi=no
if ls "$stage"/lib/libmpi.so* >/dev/null 2>&1; then
    mpi=yes
    pkglibdir=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
    pkgdatadir=$(ompi_info --parsable --path pkgdatadir 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
    [ -d "$pkglibdir" ] || die "a program links MPI, but ompi_info names no plugin folder"
    mkdir -p "$stage/mpi/plugins" "$stage/mpi/pmix_plugins" "$stage/mpi/share"
    for plugin in "$pkglibdir"/mca_*.so; do
        readelf -d "$plugin" 2>/dev/null | grep NEEDED | grep -qE "$fabric_re" && continue
        cp "$plugin" "$stage/mpi/plugins/"
    done
    # PMIx's own plugins lie near its library (Debian: <libdir>/pmix2/lib/pmix/pmix_mca_*.so).
    libpmix=$(ldd "$stage"/mpi/plugins/*.so | awk '$1 ~ /^libpmix\.so/ && $3 ~ /^\// { print $3; exit }')
    if [ -n "$libpmix" ]; then
        find "$(dirname "$(readlink -f "$libpmix")")" -maxdepth 2 -name 'pmix_mca_*.so' \
            -exec cp {} "$stage/mpi/pmix_plugins/" \;
    fi
    [ -d "$pkgdatadir" ] && cp -r "$pkgdatadir" "$stage/mpi/share/"
    bundle_libraries_of "$stage"/mpi/plugins/*.so "$stage"/mpi/pmix_plugins/*.so
fi

# ---- 3. checks: every library resolves inside the bundle; CPU instructions; glibc ---------------
phase "checking the bundle"
all_elves=()
while IFS= read -r -d '' f; do is_elf "$f" && all_elves+=("$f"); done < <(find "$stage" -type f -print0)
problems=0
for f in "${all_elves[@]}"; do
    while read -r name arrow path rest; do
        [ "$arrow" = "=>" ] || continue
        [[ $name =~ $system_re ]] && continue
        [[ $name =~ $cuda_re ]] && continue
        case $path in "$repo/$stage"/* | "$stage"/*) continue ;; esac
        say "   PROBLEM: ${f#"$stage"/} needs $name, found outside the bundle ($path $rest)"
        problems=$((problems + 1))
    done < <(LD_LIBRARY_PATH="$repo/$stage/lib:$repo/$stage/lib/common" ldd "$f" 2>/dev/null)
done

# CPU instructions beyond x86-64's baseline in our own programs (not in libraries: OpenBLAS picks its
# kernels at run time). zmm, mask or vector registers 16-31 mean AVX-512; a VEX instruction (v...) on
# xmm/ymm registers means AVX or AVX2. (The default build's -march=native programs show avx512f here.)
isa_of() {
    local asm
    asm=$(objdump -d --no-show-raw-insn -j .text "$1" 2>/dev/null)
    if grep -qE '%zmm|%k[1-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\b' <<<"$asm"; then echo avx512f
    elif grep -qP '\tv[a-z0-9]+\s.*%[xy]mm' <<<"$asm"; then echo avx
    else echo baseline; fi
}
isa_needed=baseline
program_lines=()
for p in "${built[@]}"; do
    isa=-
    if is_elf "$stage/$p"; then
        isa=$(isa_of "$stage/$p")
        case $isa in avx512f) isa_needed=avx512f ;; avx) [ $isa_needed = baseline ] && isa_needed=avx ;; esac
    fi
    program_lines+=("$(printf '  %-48s %10s  cpu: %s' "$p" "$(mib "$(stat -c %s "$stage/$p")")" "$isa")")
done
[ $isa_needed = baseline ] || say "   NOTE: some programs use $isa_needed instructions (see MANIFEST.txt); gpu_check.sh checks the CPU there"

# The newest glibc symbol version the files need: the GPU machine's glibc must be at least that (for
# lib/common too where gpu_check.sh has to use it).
newest_glibc() {
    for f in "$@"; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1
}
elves_but_common=()
for f in "${all_elves[@]}"; do [[ $f == "$stage/lib/common/"* ]] || elves_but_common+=("$f"); done
glibc_needed=$(newest_glibc "${elves_but_common[@]}")
glibc_needed_common=$(newest_glibc "${all_elves[@]}")

# ---- 4. manifest, archive, sizes ----------------------------------------------------------------
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=normal 2>/dev/null | grep -vc '^??' || true)
untracked=$(git status --porcelain --untracked-files=normal 2>/dev/null | grep -c '^??' || true)
nvcc_version=$( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
manifest=$stage/MANIFEST.txt
{
    say "# gpu_bundle: made by scripts/gpu_bundle.sh, read by scripts/gpu_check.sh (key=value lines)"
    say "commit=$commit"
    say "uncommitted=$dirty modified tracked files, $untracked untracked files"
    say "built_at=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    say "built_on=$(uname -n), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), glibc $(ldd --version | head -n1 | awk '{print $NF}')"
    say "nvcc=$nvcc_version"
    say "gpu_arch=sm_$GPU_ARCH"
    say "glibc_needed=$glibc_needed"
    say "glibc_needed_with_common=$glibc_needed_common"
    say "cpu_isa_needed=$isa_needed"
    say "gpu_machine_libs=${cuda_needed[*]}"
    say "mpi=$mpi"
    say "not_built=${failed[*]}"
    say ""
    say "programs (path, size without debug info, CPU instructions beyond x86-64 baseline):"
    printf '%s\n' "${program_lines[@]}"
    say ""
    say "libraries in lib/ (always on LD_LIBRARY_PATH there):"
    (cd "$stage/lib" && for f in *; do [ -f "$f" ] && printf '  %-40s %10s\n' "$f" "$(mib "$(stat -c %s "$f")")"; done)
    say "libraries in lib/common/ (on LD_LIBRARY_PATH only if the machine's own are missing or too old):"
    (cd "$stage/lib/common" && for f in *; do [ -f "$f" ] && printf '  %-40s %10s\n' "$f" "$(mib "$(stat -c %s "$f")")"; done)
    [ $mpi = yes ] && say "MPI plugins: $(ls "$stage/mpi/plugins" | wc -l) in mpi/plugins, $(ls "$stage/mpi/pmix_plugins" | wc -l) in mpi/pmix_plugins"
    say "expected on the GPU machine: glibc >= $glibc_needed (>= $glibc_needed_common where lib/common is used), ${cuda_needed[*]:-(no CUDA libraries: cudart is static)}"
    [ -n "${openblas_path:-}" ] && say "OpenBLAS: $openblas_path from this machine, as lib/$openblas_soname"
    say "data: ${data_files[*]}"
} >"$manifest"

phase "packing $archive"
rm -f "$archive.tmp"
tar -C "$root/stage" --owner=0 --group=0 --numeric-owner -cf - gpu_bundle | xz -T"$JOBS" -6 >"$archive.tmp" &&
    mv "$archive.tmp" "$archive" || die "packing failed"
cp "$manifest" "$carry/MANIFEST.txt"

stage_bytes=$(du -sb "$stage" | cut -f1)
archive_bytes=$(stat -c %s "$archive")
tree_bytes=$(git ls-files -z --cached --others --exclude-standard 2>/dev/null | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
travel=$((archive_bytes + tree_bytes))
{
    say ""
    say "sizes: bundle $(mib "$stage_bytes") unpacked, $(mib "$archive_bytes") packed; with the working tree ($(mib "$tree_bytes")) $(mib "$travel") travels (limit $(mib "$travel_limit"), GPU_BUNDLE_LIMIT_MIB)"
} | tee -a "$carry/MANIFEST.txt"

status=0
if [ "$travel" -gt "$travel_limit" ]; then
    say "ERROR: over the limit of $(mib "$travel_limit") (GPU_BUNDLE_LIMIT_MIB)"; status=1
elif [ "$travel" -gt $((travel_limit * 3 / 4)) ]; then
    say "WARNING: more than 3/4 of the limit of $(mib "$travel_limit") (GPU_BUNDLE_LIMIT_MIB)"
fi
if [ $problems -gt 0 ]; then
    say "ERROR: $problems libraries would be missing on the GPU machine (see above)"; status=1
else
    say "libraries: every program, library and plugin resolves inside the bundle, apart from glibc's and CUDA's"
fi
say "programs: ${#built[@]} bundled$([ ${#failed[@]} -gt 0 ] && echo ", ${#failed[@]} NOT BUILT: ${failed[*]}")"
[ $status -eq 0 ] && [ ${#failed[@]} -gt 0 ] && status=2

# ---- 5. optional rehearsal: gpu_check.sh on a stand-in for the bare GPU machine -----------------
# A private mount namespace in which /usr/lib/<multiarch> holds only glibc, libstdc++, libgcc_s and
# the libraries of the shell tools and python3 that gpu_check.sh uses; MPI's launcher is hidden too.
# Everything else the programs need must then come from the bundle (CUDA's folder stays visible).
rehearse() {
    [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null || { say "rehearsal needs root and unshare"; return 1; }
    local libdir tmp tools t py m rc
    libdir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    tmp=$(mktemp -d)
    tools="bash sh ls cp mv rm mkdir cat date sort head tail tr cut wc tee timeout env stat du nproc uname
           sleep find xargs grep sed awk gawk mawk tar xz readelf objdump od ln chmod basename dirname
           realpath readlink mktemp touch id hostname ps lscpu free join paste python3 nvidia-smi ldconfig"
    for t in $tools; do t=$(command -v "$t") && ldd "$(readlink -f "$t")" 2>/dev/null; done >"$tmp/ldd"
    py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && ldd "$(readlink -f "$py")" >>"$tmp/ldd" 2>/dev/null
    for m in /usr/lib/python3*/lib-dynload/*.so; do ldd "$m" 2>/dev/null; done >>"$tmp/ldd"
    # Kept: those libraries, and glibc's, libstdc++ and libgcc_s; then every name in libdir that
    # resolves to a kept file (the soname links).
    { awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$tmp/ldd" | xargs -r readlink -m
      ls "$libdir" | grep -E "$system_re|^(libnss_[a-z]+|libstdc\+\+|libgcc_s)\.so" | sed "s|^|$libdir/|" |
          xargs -r readlink -m
    } | grep "^$libdir/" | sort -u >"$tmp/files"
    find "$libdir" -maxdepth 1 -name '*.so*' | sort >"$tmp/names"
    xargs -r -d '\n' readlink -m <"$tmp/names" | paste "$tmp/names" - |
        awk 'NR == FNR { keep[$1] = 1; next } $2 in keep { print $1 }' "$tmp/files" - >"$tmp/links"
    cat "$tmp/files" >>"$tmp/links"
    phase "rehearsal: gpu_check.sh with $libdir reduced to $(sort -u "$tmp/links" | wc -l) entries"
    unshare -m bash -c '
        set -e
        libdir=$1 links=$2 tmp=$3; shift 3
        orig=$tmp/orig new=$tmp/new; mkdir -p "$orig" "$new"
        mount --bind "$libdir" "$orig"
        mount -t tmpfs tmpfs "$new"
        while read -r p; do n=${p#"$libdir"/}; mkdir -p "$new/$(dirname "$n")"; ln -sfn "$orig/$n" "$new/$n"; done <"$links"
        for h in /usr/bin/orted /usr/bin/orterun /usr/bin/mpirun; do [ -e "$h" ] && mount --bind /dev/null "$h"; done
        mount --bind "$new" "$libdir"
        exec "$@"' rehearse "$libdir" "$tmp/links" "$tmp" \
        env GPU_BUNDLE="$repo/$archive" bash scripts/gpu_check.sh
    rc=$?
    rm -f "$tmp/ldd" "$tmp/files" "$tmp/names" "$tmp/links"   # (never rm -r: orig was the library folder)
    rmdir "$tmp/orig" "$tmp/new" "$tmp"
    say "rehearsal: gpu_check.sh exited with status $rc"
    return $rc
}
if [ $mode_rehearse -eq 1 ]; then rehearse || status=1; fi

phase "done"
say "bundle: $archive (manifest: $carry/MANIFEST.txt); exit status $status"
exit $status
