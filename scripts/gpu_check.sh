#!/usr/bin/env bash
# The one-command check of a GPU machine that has no build tools (only the driver, the CUDA runtime
# libraries and perhaps PyTorch): run from the repository root there, after carrying the archive that
# scripts/gpu_bundle.sh made on a build machine (docs/GPU_CHECK.md, "Checking a GPU machine without
# build tools"). Each group of parts fits in one 10-minute job:
#     bash scripts/gpu_check.sh              the kernel tests, the trainer (tokens/s, MFU, the loss
#                                            going down, its first steps beside the CPU reference),
#                                            the emulator's kernel suite on the device
#     bash scripts/gpu_check.sh bench peer   every kernel benchmark, then the whole-step benchmark and
#                                            PyTorch as numerical reference and speed peer
#     bash scripts/gpu_check.sh PART...      PART: tests train emu bench peer, or all (one longer job)
# It unpacks the bundle (gpu_bundle/carry/gpu_bundle.tar.xz, or GPU_BUNDLE=an archive or an unpacked
# folder), then
#   setup  (always) sets LD_LIBRARY_PATH: the bundle's libraries, CUDA's toolkit, NCCL (the toolkit's
#          or PyTorch's); prints date, commit, device, driver; checks that every program finds every
#          library, that glibc and the CPU are new enough, and that OpenBLAS loads (one CPU step);
#          where cuobjdump exists, counts train_gpt's HGMMA and UTMALDG (Hopper) instructions;
#   tests  test/kernels/gpu_kernel_tests.sh: every nvcc-built kernel test, on the device;
#   train  train_gpt, when the bundle has it: a short GPT-2 124M run on the built-in dataset, its
#          first steps beside train_gpt_cpu's, and a small Llama 3's too (grouped-query attention on
#          the built-in data's tokens; the section marked HOOK, to grow with the trainer), and
#          two runs and a resumed one giving the same model file bit for bit; a timeline of two steps
#          (--profile-steps) checked by test/train/check_trace.py, and where nsys exists, Nsight Systems
#          finding the trainer's NVTX ranges;
#   emu    test/emu/gpu_vs_emu.sh: the emulator's kernel suite on the device and emulated, same results;
#   bench  every dev/bin/cuda_* benchmark: its checks, then its timings (attention: PyTorch's flash
#          and cuDNN attention beside it, dev/attention_torch.py, where the machine has torch);
#   peer   (HOOK too) dev/bin/bench_step: GPT-2 124M steps timed whole and split by op class; PyTorch
#          (dev/gpt2_torch.py, the machine's torch) as the independent reference: train_gpt and
#          PyTorch train the same weights on the same batches and their losses must agree; and as
#          the speed peer: torch.compile + flash attention + fused AdamW, tokens/s beside ours.
# Parts run in that order, each under its own time limit, inside a total budget (default 540 s, so
# that either group ends within 10 minutes with the setup; `all` defaults to the sum of its limits).
# Everything goes to stdout and to one report file, $OUT/gpu_report.txt (gpu_bundle/gpu_report.txt
# where OUT is unset), which ends with the figures and a summary table.
# Without a GPU the GPU parts say SKIPPED (no CUDA device) and setup still runs.
# Exit status: 0 every check passed (or was SKIPPED for want of a GPU); 1 a check failed or timed out;
# 2 nothing failed, but some part did not run (the time budget was spent).
# Environment: GPU_CHECK_BUDGET_S (total seconds); GPU_CHECK_LIMIT_TESTS, _TRAIN, _EMU, _BENCH,
# _BENCH_EACH, _PEER (seconds per part: 150, 210, 90, 180, 90, 300); GPU_CHECK_BENCHES (which
# benchmarks, e.g. "matmul gelu"); GPU_CHECK_TRAIN_ARGS (flags of the GPT-2 124M run),
# GPU_CHECK_COMPARE_ARGS, GPU_CHECK_LLAMA_COMPARE_ARGS (flags of the GPT-2 and Llama 3 runs compared
# with train_gpt_cpu), GPU_CHECK_DETERMINISM_ARGS
# (flags of the runs compared with each other), GPU_CHECK_PROFILE_ARGS (flags of the timeline's run,
# --profile-steps and -o added); GPU_CHECK_PEER_ARGS (flags
# of the runs compared with PyTorch), GPU_CHECK_PYTHON (the python with torch, default python3),
# GPU_CHECK_PEER_MODEL, _PEER_T, _PEER_B (the peer part's model, T and first B: d12, 1024, 16);
# GPU_CHECK_WORKDIR (where to unpack).
set -uo pipefail
script_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$script_dir")
t_start=$(date +%s)
limit_tests=${GPU_CHECK_LIMIT_TESTS:-150}
limit_train=${GPU_CHECK_LIMIT_TRAIN:-210}
limit_emu=${GPU_CHECK_LIMIT_EMU:-90}
limit_bench=${GPU_CHECK_LIMIT_BENCH:-180}
limit_bench_each=${GPU_CHECK_LIMIT_BENCH_EACH:-90}
limit_peer=${GPU_CHECK_LIMIT_PEER:-300}

parts=()
for p in "$@"; do
    case $p in
        tests | train | emu | bench | peer) parts+=("$p") ;;
        all) parts+=(tests train emu bench peer) ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown part '$p' (parts: tests train emu bench peer, or all)" >&2; exit 1 ;;
    esac
done
[ ${#parts[@]} -gt 0 ] || parts=(tests train emu)
wanted() { [[ " ${parts[*]} " == *" $1 "* ]]; }
# The budget: 540 s fits either group and the setup in 10 minutes; more parts get the sum of their
# limits and 60 s for the setup.
budget=60
for p in tests train emu bench peer; do
    wanted $p && budget=$((budget + $(eval echo "\$limit_$p")))
done
[ $budget -lt 540 ] && budget=540
deadline=$((t_start + ${GPU_CHECK_BUDGET_S:-$budget}))

# ---- the report: everything below goes to stdout and to the report file -------------------------
report_dir=${OUT:-$repo/gpu_bundle}
mkdir -p "$report_dir" || exit 1
report=$report_dir/gpu_report.txt
: >"$report"
exec > >(tee -a "$report") 2>&1
tee_pid=$!

section() { printf '\n======== %s ========\n' "$*"; }
elapsed() { echo $(($(date +%s) - t_start)); }

summary=() figures=()
failed=0 incomplete=0
record() {  # part status seconds detail
    summary+=("$(printf '%-34s %-8s %5ss  %s' "$1" "$2" "$3" "$4")")
    case $2 in FAIL | TIMEOUT) failed=1 ;; "NOT RUN") incomplete=1 ;; esac
}

# run_checked NAME LIMIT CMD...: runs CMD under `timeout` (never past the budget), showing and keeping
# its output (in $run_out), and sets run_status (PASS, FAIL, TIMEOUT, SKIPPED, NOT RUN), run_detail
# and run_secs from its exit status and the PASS/FAIL/SKIPPED lines it printed. The caller records.
run_out=$(mktemp)
run_checked() {
    local name=$1 limit=$2 left rc np nf ns t0
    shift 2
    left=$((deadline - $(date +%s) - 5))
    : >"$run_out"
    if [ $left -lt 10 ]; then
        run_status="NOT RUN" run_detail="time budget spent" run_secs=0
        echo "NOT RUN $name: the time budget is spent"
        return
    fi
    [ "$limit" -gt $left ] && limit=$left
    section "$name (limit ${limit} s, at +$(elapsed) s)"
    echo "\$ $*"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$run_out"
    rc=${PIPESTATUS[0]}
    run_secs=$(($(date +%s) - t0))
    np=$(grep -c '^PASS' "$run_out") nf=$(grep -c '^FAIL' "$run_out") ns=$(grep -c '^SKIPPED' "$run_out")
    if [ $((np + nf + ns)) -gt 0 ]; then run_detail="$np passed, $nf failed, $ns skipped"; else run_detail="exit status $rc"; fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        run_status=TIMEOUT run_detail="$run_detail; killed after $limit s"
    elif [ "$rc" -ne 0 ] || [ "$nf" -gt 0 ]; then
        run_status=FAIL
        [ $((np + nf + ns)) -gt 0 ] && [ "$rc" -ne 0 ] && run_detail="$run_detail; exit status $rc"
    elif [ "$np" -eq 0 ] && [ "$ns" -gt 0 ]; then
        run_status=SKIPPED
    else
        run_status=PASS
    fi
    echo "-- $name: $run_status ($run_detail) in $run_secs s"
}
run_part() { run_checked "$@"; record "$1" "$run_status" "$run_secs" "$run_detail"; }

# ---- unpack the bundle --------------------------------------------------------------------------
section "gpu_check.sh at $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
bundle_src=${GPU_BUNDLE:-}
if [ -z "$bundle_src" ]; then
    for c in "$repo/gpu_bundle/carry/gpu_bundle.tar.xz" "$repo/gpu_bundle/stage/gpu_bundle"; do
        [ -e "$c" ] && { bundle_src=$c; break; }
    done
fi
if [ -d "$bundle_src" ]; then
    B=$(cd "$bundle_src" && pwd)
elif [ -f "$bundle_src" ]; then
    work=${GPU_CHECK_WORKDIR:-${TMPDIR:-/tmp}/gpu_check}
    rm -rf "$work/gpu_bundle" && mkdir -p "$work" || exit 1
    if ! tar -xJf "$bundle_src" -C "$work" 2>/dev/null; then   # no xz there: Python's tarfile
        python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
            "$bundle_src" "$work" || { echo "FAIL cannot unpack $bundle_src"; exit 1; }
    fi
    B=$work/gpu_bundle
else
    echo "FAIL no bundle: run 'bash scripts/gpu_bundle.sh' on the build machine and carry gpu_bundle/carry"
    exit 1
fi
cd "$B" || exit 1
manifest() { sed -n "s/^$1=//p" MANIFEST.txt 2>/dev/null; }
echo "bundle: $bundle_src (unpacked in $B)"
grep -E '^(commit|uncommitted|built_at|built_on|nvcc|gpu_arch|not_built)=' MANIFEST.txt | sed 's/^/  /'
tree_commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null)
if [ -n "$tree_commit" ] && [ "$tree_commit" != "$(manifest commit)" ]; then
    echo "  NOTE: this working tree is at $tree_commit; the bundle was built from $(manifest commit)"
fi

# ---- setup: machine, libraries ------------------------------------------------------------------
section "machine"
echo "host: $(uname -n), kernel $(uname -r)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
echo "memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
glibc_here=$(ldd --version 2>/dev/null | head -n1 | awk '{ print $NF }')
echo "glibc: $glibc_here"
have_gpu=0
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    have_gpu=1
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm,clocks.max.memory,power.limit \
        --format=csv 2>/dev/null
    nvidia-smi 2>/dev/null
else
    echo "gpu: none (nvidia-smi finds no CUDA device): the GPU parts are SKIPPED"
fi
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
[ -n "$nvcc_bin" ] && echo "toolkit: $("$nvcc_bin" --version | tail -n 1)"

section "libraries"
setup_problems=0
# Folders that may hold CUDA's libraries: the toolkit's, then PyTorch's pip packages (nvidia/*/lib).
cuda_dirs=()
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    for sub in lib64 lib targets/x86_64-linux/lib; do [ -n "$d" ] && [ -d "$d/$sub" ] && cuda_dirs+=("$d/$sub"); done
done
while IFS= read -r sp; do
    for d in "$sp"/nvidia/*/lib "$sp"/torch/lib; do [ -d "$d" ] && cuda_dirs+=("$d"); done
done < <(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
nccl_module_dir=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
[ -n "$nccl_module_dir" ] && cuda_dirs=("$nccl_module_dir/lib" "${cuda_dirs[@]}")

# find_library NAME: where the machine has it, "system" if the loader finds it without help.
find_library() {
    if ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "; then echo system; return; fi
    local d
    for d in "${cuda_dirs[@]}"; do [ -e "$d/$1" ] && { echo "$d"; return; }; done
}
lib_path=$B/lib
for name in $(printf '%s\n' $(manifest gpu_machine_libs) libcublas.so.13 libcublasLt.so.13 libnccl.so.2 | awk '!seen[$0]++'); do
    where=$(find_library "$name")
    needed=$([[ " $(manifest gpu_machine_libs) " == *" $name "* ]] && echo needed || echo "not needed by the bundle")
    echo "  $name: ${where:-NOT FOUND} ($needed)"
    if [ -z "$where" ] && [ "$needed" = needed ]; then setup_problems=$((setup_problems + 1)); fi
    [ -n "$where" ] && [ "$where" != system ] && [[ ":$lib_path:" != *":$where:"* ]] && lib_path=$lib_path:$where
done

# Every ELF file of the bundle, and what ldd says it lacks with a given LD_LIBRARY_PATH.
elves=()
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && elves+=("$f")
done < <(find . -type f -print0)
missing_with() {
    local f
    for f in "${elves[@]}"; do
        LD_LIBRARY_PATH=$1 ldd "$f" 2>&1 | grep -E 'not found' | sed "s|^|  ${f#./}: |"
    done
}
base_path=${LD_LIBRARY_PATH:-}
missing=$(missing_with "$lib_path${base_path:+:$base_path}")
if [ -n "$missing" ] && [ -d "$B/lib/common" ]; then
    echo "  the machine's own copies of common libraries are missing or too old; adding the bundle's lib/common:"
    echo "$missing" | sed 's/^/  /'
    lib_path=$lib_path:$B/lib/common
    missing=$(missing_with "$lib_path${base_path:+:$base_path}")
fi
export LD_LIBRARY_PATH=$lib_path${base_path:+:$base_path}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if [ -n "$missing" ]; then
    echo "FAIL libraries: some programs cannot load:"
    echo "$missing"
    setup_problems=$((setup_problems + 1))
else
    echo "PASS libraries: all ${#elves[@]} programs and libraries of the bundle find what they need"
fi
if [ -d "$B/mpi" ]; then   # MPI from the bundle, as a single process without mpirun (gpu_bundle.sh)
    export OMPI_MCA_mca_base_component_path=$B/mpi/plugins PMIX_MCA_mca_base_component_path=$B/mpi/pmix_plugins
    export OPAL_PKGDATADIR=$B/mpi/share/openmpi OMPI_MCA_ess_singleton_isolated=1
    echo "MPI: the bundle's OpenMPI, single process (plugins in $B/mpi)"
fi

glibc_needed=$(manifest glibc_needed)
[[ ":$lib_path:" == *":$B/lib/common:"* ]] && glibc_needed=$(manifest glibc_needed_with_common)
if [ -n "$glibc_needed" ] && [ "$(printf '%s\n%s\n' "$glibc_needed" "$glibc_here" | sort -V | head -n1)" != "$glibc_needed" ]; then
    echo "FAIL glibc: the bundle needs glibc $glibc_needed, this machine has $glibc_here"
    setup_problems=$((setup_problems + 1))
fi
isa_needed=$(manifest cpu_isa_needed)
if [ -n "$isa_needed" ] && [ "$isa_needed" != baseline ] && ! grep -qw "$isa_needed" /proc/cpuinfo; then
    echo "FAIL cpu: programs of the bundle use $isa_needed instructions, which this CPU lacks (MANIFEST.txt names them)"
    setup_problems=$((setup_problems + 1))
fi
if [ $setup_problems -gt 0 ]; then
    record setup FAIL "$(elapsed)" "$setup_problems problems (see 'libraries')"
else
    record setup PASS "$(elapsed)" "libraries, glibc $glibc_here, cpu"
fi

# One step of the CPU reference trainer: OpenBLAS (dlopen()ed) and the dataset load here.
if [ -x ./train_gpt_cpu ]; then
    run_part cpu_reference_one_step 60 ./train_gpt_cpu -e custom:L2:C64:H4 -b 1 -t 64 -x 1 -v 0 -s 0
fi

# The Hopper kernels in ./train_gpt's machine code: where a cuobjdump exists (a CUDA toolkit), count its
# warpgroup MMAs (HGMMA) and TMA tile loads (UTMALDG), both sm_90a only. A figure, never a failure.
cuobjdump_bin=$(command -v cuobjdump || ls "${nvcc_bin%/*}/cuobjdump" /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -n1)
if [ -x ./train_gpt ] && [ -n "$cuobjdump_bin" ]; then
    section "Hopper instructions in ./train_gpt"
    counts=$(timeout 120 "$cuobjdump_bin" -sass ./train_gpt 2>/dev/null |
        awk '/HGMMA/ { h++ } /UTMALDG/ { u++ } END { print h + 0, u + 0 }')
    echo "./train_gpt SASS ($cuobjdump_bin): ${counts% *} HGMMA, ${counts#* } UTMALDG instructions"
    figures+=("train_gpt SASS: ${counts% *} HGMMA, ${counts#* } UTMALDG (Hopper attention: both > 0)")
else
    echo "no cuobjdump here (or no ./train_gpt): HGMMA and UTMALDG in train_gpt's SASS not counted"
fi

gpu_part() {  # NAME: false (and records SKIPPED) when there is no GPU
    [ $have_gpu -eq 1 ] && return 0
    echo "SKIPPED $1 (no CUDA device)"
    record "$1" SKIPPED 0 "no CUDA device"
    return 1
}

# ---- tests: the kernel tests on the device ------------------------------------------------------
if wanted tests && gpu_part kernel_tests; then
    run_part kernel_tests "$limit_tests" bash test/kernels/gpu_kernel_tests.sh
fi

# ---- train: train_gpt -------------------------------------------------------------------------------
# HOOK: the trainer's checks on the GPU. Grow this section as train_gpt grows (resume, ZeRO, longer
# runs, PyTorch as the reference and speed peer). Each check: run_checked with a limit, then record.

# Step lines ("step 12/40 | loss 3.4567 | lr ... | norm ... | 123.4 ms | 54321 tok/s | MFU 45.6% | ...")
# as "step loss ms tok/s mfu" rows.
step_rows() {
    awk -F' [|] ' '/^step [0-9]+\/[0-9]+ [|] loss / {
        split($1, s, "[ /]"); split($2, l, " "); ms = tok = mfu = "n/a"
        for (i = 3; i <= NF; i++) {
            if ($i ~ /^[0-9.]+ ms$/) { split($i, a, " "); ms = a[1] }  # not the "phases: ... ms" field
            if ($i ~ / tok\/s$/) { split($i, a, " "); tok = a[1] }
            if ($i ~ /^MFU /) { split($i, a, " "); mfu = a[2] }
        }
        print s[2], l[2], ms, tok, mfu }' "$1"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'; }

# train_gpt falls back to the CPU where CUDA fails: on this machine that is a failure.
on_the_gpu() {
    if [ "$run_status" = PASS ] && ! grep -q '^compute: CUDA' "$run_out"; then
        run_status=FAIL run_detail="it did not run on the GPU: $(grep -m1 -E '^(compute:|train_gpt: no CUDA)' "$run_out")"
        echo "FAIL $run_detail"
    fi
}

train_run() {  # the short GPT-2 124M job: speed, the loss going down, the GPU's telemetry (-lg)
    local args=${GPU_CHECK_TRAIN_ARGS:-"-e d12 -b 16 -t 1024 -x 40 -v 20 -m 4 -s 40 -g 32 -lg 10"}
    # shellcheck disable=SC2086 # the flags are words
    run_checked "train_gpt GPT-2 124M" "$1" ./train_gpt $args
    local rows=$(step_rows "$run_out")
    on_the_gpu
    if [ "$run_status" = PASS ]; then
        local n first last
        n=$(echo "$rows" | grep -c .)
        first=$(echo "$rows" | awk 'NR == 1 { print $2 }') last=$(echo "$rows" | awk 'END { print $2 }')
        if [ "$n" -eq 0 ]; then
            run_status=FAIL run_detail="no step lines"
        elif ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && a == a + 0 && b < a) }'; then
            run_status=FAIL run_detail="loss did not go down: $first -> $last"
        else
            # Speed from the steps after the first three (start-up, autotuning).
            local steady=$(echo "$rows" | awk 'NR > 3 || n <= 3 { print }' n="$n")
            local ms=$(echo "$steady" | awk '{ print $3 }' | median) tok=$(echo "$steady" | awk '{ print $4 }' | median)
            local mfu=$(echo "$rows" | awk 'END { print $5 }')
            local val=$(grep -E '^val loss' "$run_out" | awk '{ v = v (NR > 1 ? " " : "") $3 } END { print v }')
            run_detail="$n steps, loss $first -> $last"
            figures+=("train_gpt ($args): $n steps, loss $first -> $last, val loss ${val:-n/a}, median $ms ms/step, $tok tok/s, MFU $mfu")
            # The start-up report's compute line (MFU's peak, CUDA graphs), the last GPU reading and
            # any fused epilogue cuBLASLt refused.
            figures+=("train_gpt $(grep -m1 '^compute: ' "$run_out")")
            local gpu=$(grep -E '^step .* [|] GPU ' "$run_out" | tail -n 1 | sed 's/.* [|] GPU /GPU /')
            [ -n "$gpu" ] && figures+=("train_gpt telemetry at its last -lg step: $gpu")
            while IFS= read -r line; do figures+=("train_gpt $line"); done < <(grep -E '^matmul: .* refused' "$run_out")
        fi
    fi
    record "train_gpt GPT-2 124M" "$run_status" "$run_secs" "$run_detail"
}

# The same few steps on one batch as the fp32 CPU reference: the GPU trainer's losses must follow
# (bf16 storage: 1% at the first step, where only the forward pass differs; 3% over the steps).
compare_first=0.01 compare_all=0.03
# train_compare LIMIT [NAME ARGS]: NAME defaults to "train_gpt vs train_gpt_cpu", ARGS to GPT-2 124M's.
train_compare() {
    # Every flag of the schedule given: the two trainers' defaults differ.
    local args=${3:-${GPU_CHECK_COMPARE_ARGS:-"-e d12 -b 4 -t 64 -x 4 -a 1 -v 0 -s 0 -l 6e-4 -u 20 -q 0.1 -c 0.1 -k cosine --seed 42"}}
    local name=${2:-"train_gpt vs train_gpt_cpu"}
    local gpu_rows cpu_rows
    # shellcheck disable=SC2086
    run_checked "$name: train_gpt" "$1" ./train_gpt $args
    on_the_gpu
    local gpu_status=$run_status gpu_secs=$run_secs
    gpu_rows=$(step_rows "$run_out")
    # shellcheck disable=SC2086
    run_checked "$name: train_gpt_cpu" "$1" ./train_gpt_cpu $args
    local cpu_status=$run_status secs=$((gpu_secs + run_secs))
    cpu_rows=$(step_rows "$run_out")
    if [ "$gpu_status" != PASS ] || [ "$cpu_status" != PASS ]; then
        record "$name" FAIL "$secs" "a run failed (train_gpt: $gpu_status, train_gpt_cpu: $cpu_status)"
        return
    fi
    # Both runs' losses by step, side by side; the last line is the verdict.
    local table
    table=$(awk -v tf="$compare_first" -v ta="$compare_all" '
        NR == FNR { gpu[$1] = $2; next }
        $1 in gpu {
            d = (gpu[$1] - $2) / $2; if (d < 0) d = -d
            if (n++ == 0) print "step   train_gpt  train_gpt_cpu  relative difference"
            printf "%4d  %10s  %13s  %.2e\n", $1, gpu[$1], $2, d
            if ((n == 1 && d > tf) || d > ta || gpu[$1] != gpu[$1] + 0) bad++
            if (d > worst) worst = d
        }
        END {
            if (n == 0) print "FAIL no step appears in both runs"
            else if (bad) printf "FAIL %d of %d steps differ by more than %g (first step %g); worst %.2e\n", bad, n, ta, tf, worst
            else printf "PASS %d steps agree within %g (first step %g); worst %.2e\n", n, ta, tf, worst
        }' <(echo "$gpu_rows") <(echo "$cpu_rows"))
    echo "$table"
    local verdict=$(echo "$table" | tail -n 1)
    record "$name" "${verdict%% *}" "$secs" "${verdict#* }"
}

# A small Llama 3 (grouped-query attention: 8 query heads, 2 key/value heads; head size 64, RoPE,
# RMSNorm, SwiGLU) the same way, on the built-in data's tokens (GPT-2's ids are valid Llama ids).
llama_compare_args=${GPU_CHECK_LLAMA_COMPARE_ARGS:-"-e llama3:L4:C512:H8:KV2:T256:V50304 -i data/janeausten/janeausten_train.bin -b 4 -t 256 -x 4 -a 1 -v 0 -s 0 -l 3e-4 -u 20 -q 0.1 -c 0.1 -k cosine --seed 42"}

# Two runs of one command give the same bits, and so does a run stopped at step 2 and resumed (the
# cuBLASLt algorithms are chosen once, by rank 0, and kept in the run folder: kernels/matmul.h,
# train/algorithm_table.h); every run must also exit cleanly.
train_determinism() {
    local args=${GPU_CHECK_DETERMINISM_ARGS:-"-e d12 -b 4 -t 64 -x 4 -v 0 -s 0 -n 2"}
    local dir status=PASS detail="" t0 each=$(($1 / 4 > 10 ? $1 / 4 : 10)) run cost=""
    dir=$(mktemp -d) t0=$(date +%s)
    for run in "a" "b" "c --stop-at 2" "c -y 1"; do
        # shellcheck disable=SC2086 # the flags are words
        run_checked "train_gpt determinism: -o $run" "$each" ./train_gpt $args -o "$dir"/$run
        on_the_gpu
        [ "$run_status" = PASS ] || { status=FAIL detail="-o $run: $run_detail"; break; }
        # What its checkpoints held the loop for (the second's host copy, the first's beside it).
        [ "$run" = a ] && cost=$(grep -m1 '^checkpoint cost' "$run_out")
    done
    [ -n "$cost" ] && figures+=("train_gpt determinism run a's $cost")
    if [ $status = PASS ] && ! grep -q '^matmul algorithms: .* loaded from' "$run_out"; then
        status=FAIL detail="the resumed run did not load the run folder's matmul algorithms"
    fi
    local last=$(ls "$dir"/a/model_*.bin 2>/dev/null | tail -n 1)
    if [ $status = PASS ]; then
        if [ -z "$last" ]; then status=FAIL detail="no model file in $dir/a"
        elif ! cmp -s "$last" "$dir/b/$(basename "$last")"; then status=FAIL detail="two runs differ: $(basename "$last")"
        elif ! cmp -s "$last" "$dir/c/$(basename "$last")"; then status=FAIL detail="the resumed run differs: $(basename "$last")"
        else detail="two runs and a resumed one: $(basename "$last") identical"
        fi
    fi
    figures+=("train_gpt determinism ($args): $detail")
    echo "-- train_gpt determinism: $status ($detail)"
    record "train_gpt determinism" "$status" $(($(date +%s) - t0)) "$detail"
    rm -rf "$dir"
}

train_profile() {  # the phase timers' timeline on the GPU, and Nsight Systems' view of the NVTX ranges
    local args=${GPU_CHECK_PROFILE_ARGS:-"-e d12 -b 4 -t 64 -x 4 -v 0 -s 0 --timers 2"}
    local dir status=PASS detail t0
    dir=$(mktemp -d) t0=$(date +%s)
    # shellcheck disable=SC2086 # the flags are words
    run_checked "train_gpt timeline" "$1" ./train_gpt $args --profile-steps 3:4 -o "$dir/run"
    on_the_gpu
    if [ "$run_status" != PASS ]; then status=FAIL detail=$run_detail
    elif ! command -v python3 >/dev/null; then detail="trace.json written (no python3 to check it)"
    elif detail=$(python3 test/train/check_trace.py "$dir/run/trace.json" 1 3 4 "$dir/run/metrics.jsonl" 2>&1); then :
    else status=FAIL
    fi
    if [ $status = PASS ] && command -v nsys >/dev/null; then
        # shellcheck disable=SC2086
        if nsys profile --trace=cuda,nvtx -o "$dir/nsys" ./train_gpt $args --override -x 3 --cuda-graphs 0 >"$dir/nsys.log" 2>&1 &&
           { nsys stats --report nvtx_sum "$dir/nsys.nsys-rep" 2>/dev/null ||  # older releases: nvtxsum
             nsys stats --report nvtxsum "$dir/nsys.nsys-rep" 2>/dev/null; } | grep -q 'layer 0 forward'; then
            detail="$detail; nsys shows the NVTX ranges (layer 0 forward, ...)"
        else
            status=FAIL detail="$detail; nsys found no 'layer 0 forward' range: $(tail -n 2 "$dir/nsys.log" | tr '\n' ' ')"
        fi
    fi
    figures+=("train_gpt timeline: $detail")
    echo "-- train_gpt timeline: $status ($detail)"
    record "train_gpt timeline" "$status" $(($(date +%s) - t0)) "$detail"
    rm -rf "$dir"
}

if wanted train && gpu_part train_gpt; then
    if [ ! -x ./train_gpt ]; then
        echo "SKIPPED train_gpt (not in the bundle: $(manifest not_built | grep -qw train_gpt && echo 'it failed to build' || echo 'no train_gpt.cu'))"
        record train_gpt SKIPPED 0 "not in the bundle"
    else
        train_deadline=$(($(date +%s) + limit_train))
        train_run $((limit_train / 2))
        if [ -x ./train_gpt_cpu ]; then
            left=$((train_deadline - $(date +%s)))
            train_compare $((left / 3 > 10 ? left / 3 : 10))
            left=$((train_deadline - $(date +%s)))
            train_compare $((left / 4 > 10 ? left / 4 : 10)) "train_gpt vs train_gpt_cpu, Llama 3" "$llama_compare_args"
        fi
        left=$((train_deadline - $(date +%s)))
        train_determinism $((left > 60 ? left * 2 / 3 : 40))
        left=$((train_deadline - $(date +%s)))
        train_profile $((left > 20 ? left : 20))
    fi
fi

# ---- emu: the emulator's kernel suite, on the device and emulated -------------------------------
if wanted emu && gpu_part gpu_vs_emu; then
    run_part gpu_vs_emu "$limit_emu" env BUILD=build bash test/emu/gpu_vs_emu.sh
fi

# ---- bench: every benchmark: checks, then timings -----------------------------------------------
if wanted bench && gpu_part benchmarks; then
    bench_deadline=$(($(date +%s) + limit_bench))
    found=0
    for b in dev/bin/cuda_*; do
        [ -x "$b" ] || continue
        name=${b#dev/bin/cuda_}
        if [ -n "${GPU_CHECK_BENCHES:-}" ] && [[ " $GPU_CHECK_BENCHES " != *" $name "* ]]; then continue; fi
        found=1
        left=$((bench_deadline - $(date +%s)))
        if [ $left -lt 10 ]; then
            record "bench $name" "NOT RUN" 0 "the benchmarks' $limit_bench s are spent"; continue
        fi
        run_checked "bench $name" $((left < limit_bench_each ? left : limit_bench_each)) "$b"
        record "bench $name" "$run_status" "$run_secs" "$run_detail"
        # The figures: lines with a rate or a share of a ceiling.
        while IFS= read -r line; do figures+=("$name: $line"); done \
            < <(grep -E 'GB/s|TFLOP/s|GFLOP/s|% of' "$run_out" | grep -vE '^(PASS|FAIL|SKIPPED)')
        # The attention benchmark's peer: PyTorch's flash and cuDNN attention at the same shapes, on
        # this card in this run (dev/attention_torch.py, with the machine's own torch).
        if [ "$name" = attention ] && [ -f dev/attention_torch.py ] &&
            env LD_LIBRARY_PATH="$base_path" "${GPU_CHECK_PYTHON:-python3}" -c 'import torch' 2>/dev/null; then
            left=$((bench_deadline - $(date +%s)))
            run_checked "bench attention: PyTorch peer" $((left < 60 ? (left > 10 ? left : 10) : 60)) \
                env LD_LIBRARY_PATH="$base_path" "${GPU_CHECK_PYTHON:-python3}" dev/attention_torch.py
            record "bench attention: PyTorch peer" "$run_status" "$run_secs" "$run_detail"
            while IFS= read -r line; do figures+=("attention peer: $line"); done < <(grep -E 'TFLOP/s' "$run_out")
        fi
    done
    [ $found -eq 1 ] || { echo "SKIPPED benchmarks (none in the bundle)"; record benchmarks SKIPPED 0 "none in the bundle"; }
fi

# ---- peer (HOOK): the step split by op class, and PyTorch as reference and speed peer -----------
# dev/bin/bench_step times GPT-2 124M steps of our model whole and op class by op class. PyTorch
# (dev/gpt2_torch.py with this machine's torch) is then
#   - the reference: train_gpt and PyTorch train the same weights (a model file train_gpt wrote) on
#     the same batches (the built-in dataset, sequential order) with the same constant learning rate
#     for 20 steps; every step's loss must agree: within 0.5% at step 1 (same weights, so only the
#     forward pass's rounding differs) and 2% at every step (the updates' rounding differs too and
#     compounds; train_gpt rounds weights, activations and gradients to bf16; dev/gpt2_torch.py says
#     what was measured). PyTorch runs once in fp32 (the numerics we approximate) and once in bf16
#     autocast (a mixed-precision peer);
#   - the speed peer: torch.compile, bf16 autocast, flash attention, fused AdamW, at the largest batch
#     that fits; its tokens/s beside ours at the same batch ("ours / PyTorch" in the figures).
python_bin=${GPU_CHECK_PYTHON:-python3}
# PyTorch runs with the machine's own library path: the bundle's libraries are not for it.
torch_env=(env LD_LIBRARY_PATH="$base_path" "$python_bin")
peer_data=data/janeausten/janeausten_train.bin
# The model, T and B of the benchmarks (others for rehearsals on a small model).
peer_model=${GPU_CHECK_PEER_MODEL:-d12} peer_seq_len=${GPU_CHECK_PEER_T:-1024} peer_batch=${GPU_CHECK_PEER_B:-16}
ours_tps="" ours_batch="" torch_tps="" torch_batch=""

# bench_step at batch $2 (more flags after it); its result line sets ours_tps and ours_batch.
peer_bench_step() {
    local limit=$1 batch=$2 name="bench_step $peer_model B=$2"
    shift 2
    [ $# -gt 0 ] && name="$name ($*)"
    run_checked "$name" "$limit" ./dev/bin/bench_step --model "$peer_model" -b "$batch" -t "$peer_seq_len" \
        -i "$peer_data" "$@"
    record "$name" "$run_status" "$run_secs" "$run_detail"
    local result
    result=$(grep -m1 '^bench_step_result ' "$run_out")
    if [ "$run_status" = PASS ] && [ -n "$result" ]; then
        ours_batch=$batch ours_tps=$(echo "$result" | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p')
        figures+=("bench_step B=$batch: $(grep -m1 'median step' "$run_out" | sed 's/^ *//')")
        local mfu_line
        mfu_line=$(grep -m1 '^ *MFU ' "$run_out" | sed 's/^ *//')
        [ -n "$mfu_line" ] && figures+=("bench_step B=$batch: $mfu_line")
        while IFS= read -r line; do figures+=("bench_step B=$batch | $line"); done \
            < <(sed -n '/^op class /,/^difference/p' "$run_out")
    fi
}

peer_reference() {  # LIMIT: the three runs share it
    local part_deadline=$(($(date +%s) + $1))
    # lr 1e-4: at 6e-4 without warm-up, 1,024 tokens a step, GPT-2 124M trains at the edge of
    # stability on this data, and a loss spike in one trainer and not the other parts the runs
    # (dev/RESULTS.md, the first run on a GPU).
    local args=${GPU_CHECK_PEER_ARGS:-"-b 4 -t 256 -x 20 -l 1e-4 -c 0.1"}
    local dir left model secs=0 dtype
    dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_peer.XXXXXX")
    # Initial weights in a file both read (train_gpt writes no model_00000000.bin): a first step at
    # learning rate 0 moves no fp32 master weight (AdamW changes each by lr times its update), and the
    # checkpoint it ends with holds them, rounded to bf16 (stochastically: not bit for bit the bf16
    # weights the run started from, which does not matter, since both trainers start from the file).
    run_checked "peer: initial weights (train_gpt -x 1 -l 0)" 90 ./train_gpt -e "$peer_model" -b 4 -t 64 -x 1 -l 0 \
        -k constant -v 0 -s 0 -i "$peer_data" -o "$dir/init"
    on_the_gpu
    model=$dir/init/model_00000001.bin
    rm -f "$dir"/init/state_*  # 1.5 GB of optimizer state, not needed
    if [ "$run_status" != PASS ] || [ ! -s "$model" ]; then
        record "PyTorch reference" FAIL "$run_secs" "no initial model file ($run_detail)"
        rm -rf "$dir"; return
    fi
    secs=$run_secs
    left=$((part_deadline - $(date +%s)))
    # shellcheck disable=SC2086 # the flags are words
    run_checked "peer: train_gpt from those weights" $((left / 3 > 10 ? left / 3 : 10)) ./train_gpt -e "$model" \
        $args --override -k constant -u 0 -v 0 -s 0 -i "$peer_data"
    on_the_gpu
    secs=$((secs + run_secs))
    if [ "$run_status" != PASS ]; then
        record "PyTorch reference" FAIL "$secs" "train_gpt failed ($run_detail)"
        rm -rf "$dir"; return
    fi
    cp "$run_out" "$dir/train_gpt.log"
    for dtype in fp32 bf16; do
        left=$((part_deadline - $(date +%s)))
        [ "$dtype" = fp32 ] && left=$((left / 2))  # half for each of the two runs
        # shellcheck disable=SC2086
        run_checked "peer: PyTorch reference ($dtype) vs train_gpt" $((left > 10 ? left : 10)) "${torch_env[@]}" \
            dev/gpt2_torch.py --check -e "$model" $args -i "$peer_data" --dtype "$dtype" --compare "$dir/train_gpt.log"
        local verdict
        verdict=$(grep -E '^(PASS|FAIL) torch reference' "$run_out" | tail -n 1)
        record "PyTorch reference $dtype vs train_gpt" "$run_status" "$((secs + run_secs))" "${verdict:-$run_detail}"
        [ -n "$verdict" ] && figures+=("PyTorch $dtype vs train_gpt ($args, constant lr): $verdict")
        secs=0
    done
    rm -rf "$dir"
}

peer_torch_bench() {  # LIMIT
    run_checked "peer: PyTorch speed (GPT-2 124M, torch.compile)" "$1" "${torch_env[@]}" dev/gpt2_torch.py --bench
    local result
    result=$(grep -m1 '^peer_result ' "$run_out")
    if [ "$run_status" = PASS ] && [ -n "$result" ]; then
        torch_batch=$(echo "$result" | sed -n 's/.* B=\([0-9]*\) .*/\1/p')
        torch_tps=$(echo "$result" | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p')
        run_detail="B=$torch_batch, $torch_tps tok/s"
        figures+=("PyTorch peer: $(grep -m1 '^median step' "$run_out")")
        figures+=("PyTorch peer: $(grep -m1 '^PyTorch peer:' "$run_out" | sed 's/^PyTorch peer: //')")
    fi
    record "PyTorch speed peer" "$run_status" "$run_secs" "$run_detail"
}

if wanted peer && gpu_part peer; then
    peer_deadline=$(($(date +%s) + limit_peer))
    peer_left() { echo $((peer_deadline - $(date +%s))); }
    if [ ! -x ./dev/bin/bench_step ]; then
        echo "SKIPPED bench_step (not in the bundle)"
        record bench_step SKIPPED 0 "not in the bundle"
    else
        peer_bench_step 90 "$peer_batch"
    fi
    ours_first_tps=$ours_tps
    if ! "${torch_env[@]}" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        echo "SKIPPED PyTorch reference and speed peer ('$python_bin' has no torch that sees the GPU)"
        record "PyTorch reference and peer" SKIPPED 0 "no torch with CUDA in $python_bin"
    elif [ ! -f dev/gpt2_torch.py ]; then
        echo "SKIPPED PyTorch reference and speed peer (dev/gpt2_torch.py is not in the bundle)"
        record "PyTorch reference and peer" SKIPPED 0 "dev/gpt2_torch.py not in the bundle"
    else
        if [ -x ./train_gpt ]; then
            peer_reference $(( $(peer_left) / 3 < 120 ? $(peer_left) / 3 : 120 ))
        else
            record "PyTorch reference" SKIPPED 0 "no train_gpt in the bundle"
        fi
        peer_torch_bench $(( $(peer_left) - 30 > 30 ? $(peer_left) - 30 : 30 ))
        # Ours at PyTorch's batch, when that is another: whole steps only.
        if [ -n "$torch_batch" ] && [ "$torch_batch" != "$peer_batch" ] && [ -x ./dev/bin/bench_step ]; then
            peer_bench_step $(( $(peer_left) > 20 ? $(peer_left) : 20 )) "$torch_batch" --whole-step-only
        fi
        if [ -n "$torch_tps" ]; then
            if [ -n "$ours_tps" ] && [ "$ours_batch" = "$torch_batch" ]; then
                figures+=("$(awk -v o="$ours_tps" -v t="$torch_tps" -v b="$torch_batch" 'BEGIN {
                    printf "our tokens/s / PyTorch tokens/s (B=%d): %.0f / %.0f = %.2f", b, o, t, o / t }')")
            fi
            if [ -n "$ours_first_tps" ] && [ "$torch_batch" != "$peer_batch" ]; then
                figures+=("$(awk -v o="$ours_first_tps" -v t="$torch_tps" -v a="$peer_batch" -v b="$torch_batch" 'BEGIN {
                    printf "our tokens/s at B=%d / PyTorch tokens/s at B=%d: %.0f / %.0f = %.2f", a, b, o, t, o / t }')")
            fi
        fi
    fi
fi

# ---- figures and summary ------------------------------------------------------------------------
section "figures"
if [ ${#figures[@]} -gt 0 ]; then printf '%s\n' "${figures[@]}"; else echo "(none)"; fi
section "summary ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(elapsed) s)"
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)
echo "bundle $(manifest commit) built $(manifest built_at); device: ${device:-none}"
[ $have_gpu -eq 1 ] || echo "no CUDA device here: the GPU parts are SKIPPED"
printf '%-34s %-8s %6s  %s\n' part status time detail
printf '%s\n' "${summary[@]}"
status=0
if [ $failed -eq 1 ]; then status=1; verdict=FAIL
elif [ $incomplete -eq 1 ]; then status=2; verdict="INCOMPLETE (time budget spent)"
else verdict=PASS; fi
echo "gpu_check: $verdict; report: $report"
rm -f "$run_out"
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $status
