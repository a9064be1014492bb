#!/usr/bin/env bash
# One call on the GPU machine (see BENCHMARKS.md): GPU tests, then the GPU benchmarks of every
# issue, logs and JSON into $OUT/r and one tarball. Stage 1: tests + single-GPU benchmarks;
# stage 2 (argument "multi"): the multi-GPU batch run; "frames": the stacked frame engine.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
R=$OUT/r; mkdir -p "$R"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
python3 -c "from importlib.metadata import version as v; print(*(f'{p} {v(p)}' for p in ('numba', 'numba-cuda', 'cupy-cuda13x', 'numpy', 'cuda-core', 'h5py', 'scipy')))" | tee "$R/versions.txt"
step() {  # step NAME SECONDS CMD...: run with a time limit, log to $R/NAME.log, print its tail
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "exit=$? after $((SECONDS - t0)) s" | tee -a "$R/$name.log"
  tail -n 25 "$R/$name.log"
}
forces_batch() {  # forces_batch SURFACE NAME FRAMES [LIBRARY]: exact forces in batches of 32
  # of colipase against energy-only ones (forces_cost.py); a library tree gets this data/
  [ -n "${4:-}" ] && [ ! -e "$4/data" ] && ln -s "$PWD/data" "$4/data"
  PYTHONPATH=/tmp/site:${4:-$PWD} step "forces_batch_$1_$2" 150 python3 benchmarks/forces_cost.py \
    --backend cuda --maps-backend cuda --surface "$1" --pqr data/1lpb_chainA.pqr --spacing 0.5 \
    --batch 32 --frames "$3" --warmup 2 --energy-engine auto --exact-engine auto \
    --json "$R/forces_batch_$1_$2.json" ${FORCES_ARGS:-}
}
stages() {  # stages TREE...: the stage split of a batch's exact forces ("mol", colipase) with
  # each tree: "head" this one, another name .gpu/NAME
  for t in "$@"; do
    P=/tmp/site:$PWD; [ "$t" = head ] || P=/tmp/site:$PWD/.gpu/$t
    [ "$t" = head ] || [ -e "$PWD/.gpu/$t/data" ] || ln -s "$PWD/data" "$PWD/.gpu/$t/data"
    PYTHONPATH=$P step "stages_mol_$t" 100 python3 benchmarks/stacked_forces_stages.py \
      --pqr data/1lpb_chainA.pqr --surface mol --batch 32 --batches 2 --warmup 2 \
      --json "$R/stages_mol_$t.json"
  done
}
if [ "${1:-single}" = "frames" ]; then
  step gpu_tests 300 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step md_batch 150 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-stacked --batch 16 --json "$R/md_batch.json"
  step md_stacked 150 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-throughput --frames 32 --stacked-batches 8 32 64 --maps-backend cuda \
    --stacked-methods sor multigrid --json "$R/md_stacked.json"
  step frames_profile_mg 100 python3 benchmarks/frames_profile.py --batches 1 32 64 \
    --method multigrid --json "$R/frames_profile_mg.json"
elif [ "${1:-single}" = "s4" ]; then  # fourth session: device stacks, branch-free φ_c
  step gpu_tests 200 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step coulomb 60 python3 benchmarks/coulomb_kernel.py --frames 1 8 64 --nodes 4 8 16 --json "$R/coulomb.json"
  step md_stacked 150 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-throughput --frames 32 --stacked-batches 32 64 --maps-backend cuda \
    --stacked-methods sor multigrid --json "$R/md_stacked.json"
  step md_batch 150 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-stacked --solve-batches 16 32 64 --repeats 3 --json "$R/md_batch.json"
  step solve_batch_profile 40 python3 benchmarks/solve_batch_profile.py --n 97 --batch 32 --top 15
elif [ "${1:-single}" = "s4final" ]; then  # the same measurements again, and batch --stack
  step md_stacked 90 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-throughput --frames 32 --stacked-batches 32 64 --maps-backend cuda \
    --stacked-methods sor multigrid --json "$R/md_stacked.json"
  step md_batch 150 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline \
    --skip-stacked --solve-batches 16 32 64 --repeats 3 --json "$R/md_batch.json"
  step batch_stack 90 python3 benchmarks/batch_stack.py --files 2 --grids-per-file 16 --n 65 \
    --stacks 1 16 --json "$R/batch_stack.json"
elif [ "${1:-single}" = "s5" ]; then  # fifth session: the one-pipeline redesign (issue 16)
  step gpu_tests 330 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  RESULTS=$R/compare LIMIT=150 step compare 460 bash benchmarks/redesign_compare.sh ${ROUNDS:-2} "old new"
elif [ "${1:-single}" = "s6" ]; then  # sixth session: frames in batches of 32, old and new
  step gpu_tests 250 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning \
    tests/test_frames.py tests/test_calculator.py tests/test_cuda_maps.py
  for r in 1 2 3; do for t in old new; do  # per call: maps / solve / evaluate, then cProfile
    dir=$PWD; [ "$t" = old ] && dir=$PWD/.gpu/old  # (a copy of the script: not this tree's path)
    mkdir -p /tmp/b/bench && cp benchmarks/calculator_host_profile.py benchmarks/trajectory.py /tmp/b/bench/
    PYTHONPATH=/tmp/site:$dir step "profile_${t}_$r" 200 python3 /tmp/b/bench/calculator_host_profile.py \
      --pqr "$PWD/data/1lpb_chainA.pqr" --backend cuda --batch 32 --batches 2 --timed 30 --top 60
  done; done
  RESULTS=$R/frames PARTS=frames LIMIT=150 step compare 460 bash benchmarks/redesign_compare.sh 3 "old new"
elif [ "${1:-single}" = "s6gpu" ]; then  # sixth session: every GPU test, nonlinear and forces cost
  step gpu_tests 330 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step nonlinear_cost 120 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 3 --json "$R/nonlinear_cost.json"
  step forces_cost 100 python3 benchmarks/forces_cost.py --backend cuda --json "$R/forces_cost.json"
elif [ "${1:-single}" = "s6compare" ]; then  # sixth session: issue 16's comparison at the last commit
  RESULTS=$R/compare LIMIT=150 step compare 560 bash benchmarks/redesign_compare.sh ${ROUNDS:-2} "old new"
elif [ "${1:-single}" = "s7" ]; then  # seventh session: every GPU test (nonlinear merged), 385³ Newton
  step gpu_tests 360 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step robust_385 200 python3 benchmarks/nonlinear_robust.py --n 385 --backend cuda \
    --json "$R/robust_385.json"
elif [ "${1:-single}" = "s7b" ]; then  # seventh session: strongly nonlinear 385³, NVE drift
  step gpu_fixed 120 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning \
    tests/test_cuda_maps.py tests/test_nonlinear.py
  step robust_385_r0 200 python3 benchmarks/nonlinear_robust.py --n 385 --backend cuda \
    --ion-radius 0 --json "$R/robust_385_r0.json"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/omm/*.whl
  step nve_drift 330 python3 benchmarks/nve_drift.py --steps 2000 --surface svdw --spacing 0.7 \
    --backend cuda --json "$R/nve_drift.json"
elif [ "${1:-single}" = "s7c" ]; then  # seventh session, after the merges: GPU tests, memory, SES frames, MM/PBSA
  step gpu_tests 300 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step memory 70 python3 benchmarks/memory_per_node.py --backend cuda --sizes 257 513 \
    --json "$R/memory_cuda.json"
  step nonlinear_cost 70 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 2 --json "$R/nonlinear_cost.json"
  step frames_ses 50 python3 benchmarks/frames_ses.py --backend cuda --batch 32 --repeats 3
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/mda/*.whl
  step mmpbsa 50 python3 benchmarks/mmpbsa_apbs.py --backend cuda --no-apbs --copies 10 \
    --json "$R/mmpbsa_gpu.json"
elif [ "${1:-single}" = "s8" ]; then  # eighth session: every GPU test, where the SES frames' time goes
  step gpu_tests 430 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  for m in multigrid sor; do
    step "frames_profile_mol_$m" 60 python3 benchmarks/frames_profile.py --batches 1 32 \
      --surface mol --method $m --repeat 3 --json "$R/frames_profile_mol_$m.json"
  done
elif [ "${1:-single}" = "s8b" ]; then  # eighth session: SES kernels, true frame rate, memory and Newton profiles
  step frames_ses 90 python3 benchmarks/frames_ses.py --backend cuda --batch 32 --repeats 3
  step frames_profile_mol 60 python3 benchmarks/frames_profile.py --batches 1 32 --surface mol \
    --method multigrid --repeat 3 --json "$R/frames_profile_mol.json"
  step gpu_memory_peak 60 python3 benchmarks/gpu_memory_peak.py --n 257 --top 25
  step nonlinear_profile 120 python3 benchmarks/nonlinear_cost.py --backend cuda --n 257 \
    --repeat 2 --profile 45 --json "$R/nonlinear_cost.json"
elif [ "${1:-single}" = "s8c" ]; then  # eighth session: coarse kernels, SES pieces, Newton recordings
  step frames_ses 80 python3 benchmarks/frames_ses.py --backend cuda --batch 32 --repeats 3 \
    --only stacked
  step frames_profile_mol 45 python3 benchmarks/frames_profile.py --batches 1 32 --surface mol \
    --method multigrid --repeat 3 --json "$R/frames_profile_mol.json"
  step gpu_memory_peak 30 python3 benchmarks/gpu_memory_peak.py --n 257 --top 25
  step nonlinear_cost 70 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 3 --json "$R/nonlinear_cost.json"
  step gpu_solvers 70 python3 benchmarks/gpu_solvers.py --sizes 129 257 513 --methods sor mgcg \
    --sor-max 129 --no-cupy-cg --json "$R/gpu_solvers.json"
  step gpu_tests 260 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_gpu_memory.py tests/test_nonlinear.py tests/test_frames_ses.py \
    tests/test_cuda_maps.py tests/test_multigrid.py tests/test_cuda_backend.py \
    tests/test_stacked_multigrid.py tests/test_solver.py tests/test_frames.py
elif [ "${1:-single}" = "s8d" ]; then  # eighth session, last call: MM/PBSA on the engine, SES frames, tests
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/mda/*.whl
  step mmpbsa 100 python3 benchmarks/mmpbsa_apbs.py --backend cuda --no-apbs --copies 4 \
    --batch 32 --json "$R/mmpbsa_gpu.json"
  step frames_ses 60 python3 benchmarks/frames_ses.py --backend cuda --batch 32 --repeats 3 \
    --only stacked
  step frames_profile_mol 40 python3 benchmarks/frames_profile.py --batches 1 32 --surface mol \
    --method multigrid --repeat 3 --json "$R/frames_profile_mol.json"
  step gpu_tests 150 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_frames_ses.py tests/test_cuda_maps.py tests/test_binding_engine.py \
    tests/test_frames.py tests/test_nonlinear.py tests/test_calculator.py
  step nonlinear_129 40 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 --repeat 3 \
    --profile 30
elif [ "${1:-single}" = "s9" ]; then  # ninth session: Newton's time per step, then the GPU tests last run short
  step nonlinear_cost 120 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 3 --json "$R/nonlinear_cost.json" --profile 40
  step gpu_tests 330 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_frames_ses.py tests/test_binding_engine.py tests/test_cuda_maps.py \
    tests/test_frames.py tests/test_nonlinear.py tests/test_calculator.py tests/test_nonpolar.py
elif [ "${1:-single}" = "s9b" ]; then  # ninth session: Newton after the start's fix, every other GPU test
  step nonlinear_cost 120 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 5 --json "$R/nonlinear_cost.json"
  step gpu_tests 420 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    --ignore tests/test_frames_ses.py --ignore tests/test_binding_engine.py \
    --ignore tests/test_cuda_maps.py --ignore tests/test_frames.py \
    --ignore tests/test_calculator.py --ignore tests/test_nonpolar.py
elif [ "${1:-single}" = "s9c" ]; then  # ninth session: stacked Newton on CUDA, its tests and time
  step gpu_tests 200 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_nonlinear.py tests/test_batched.py
  step nonlinear_batch 150 python3 benchmarks/nonlinear_batch.py --backend cuda --n 65 97 \
    --batch 16 --repeat 3 --json "$R/nonlinear_batch.json"
  step nonlinear_cost 90 python3 benchmarks/nonlinear_cost.py --backend cuda --n 129 257 \
    --repeat 5 --json "$R/nonlinear_cost.json"
elif [ "${1:-single}" = "s9d" ]; then  # ninth session, after the dedupe merge: every GPU test
  step gpu_tests 470 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    -x --durations=15
elif [ "${1:-single}" = "s10" ]; then  # tenth session: every GPU test after the simulator-size and start-up changes
  step gpu_tests 500 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    -x --durations=15
elif [ "${1:-single}" = "s10b" ]; then  # tenth session: the APBS suite on the H200 (issue 21)
  step apbs_suite_cuda 300 python3 benchmarks/apbs_suite.py benchmarks/apbs_inputs --skip '*actin*' \
    --no-apbs --backend cuda --json "$R/apbs_suite_cuda.json" --markdown "$R/apbs_suite_cuda.md"
  step apbs_inprocess_cuda 240 python3 benchmarks/apbs_inprocess.py benchmarks/apbs_inputs \
    --skip '*actin*' --backend cuda --runs 3 --json "$R/apbs_inprocess_cuda.json" \
    --markdown "$R/apbs_inprocess_cuda.md"
elif [ "${1:-single}" = "s10c" ]; then  # tenth session: the APBS suite with the maps on the GPU too
  step gpu_apbs_tests 120 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_apbs_input.py tests/test_cli.py
  step apbs_inprocess_cuda_maps 200 python3 benchmarks/apbs_inprocess.py benchmarks/apbs_inputs \
    --skip '*actin*' --backend cuda --runs 2 --json "$R/apbs_inprocess_cuda_maps.json" \
    --markdown "$R/apbs_inprocess_cuda_maps.md"
elif [ "${1:-single}" = "s10d" ]; then  # tenth session: where an in-process APBS run spends its time on the H200
  cp -r benchmarks/apbs_inputs/FKBP /tmp/fk && (cd /tmp/fk && python3 -c "
import cProfile, pstats, io, time, pbsolver as pb
for i in range(2):
    t = time.perf_counter(); pb.apbs.run('1d7h-dmso-mol.in', backend='cuda', out=io.StringIO()); print('run', i, time.perf_counter() - t)
pr = cProfile.Profile(); pr.enable(); r = pb.apbs.run('1d7h-dmso-mol.in', backend='cuda', out=io.StringIO()); pr.disable()
print(r.text[-3000:])
s = pstats.Stats(pr); s.sort_stats('tottime').print_stats(25); s.sort_stats('cumulative').print_stats(40)
" > "$R/fkbp_profile.txt" 2>&1)
elif [ "${1:-single}" = "s10e" ]; then  # tenth session: the maps' arrays through CuPy's pool; its GPU tests and the FKBP run again
  step gpu_maps_tests 200 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_cuda_maps.py tests/test_apbs_input.py tests/test_focusing.py tests/test_calculator.py
  step apbs_inprocess_fkbp 100 python3 benchmarks/apbs_inprocess.py benchmarks/apbs_inputs \
    --only '*FKBP*' --backend cuda --runs 3 --json "$R/apbs_inprocess_fkbp.json"
elif [ "${1:-single}" = "s11" ]; then  # eleventh session: SES forces (issue 19); every GPU test after the SES body refactor
  step gpu_tests 500 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
elif [ "${1:-single}" = "s11b" ]; then  # eleventh session: the cost of exact forces per surface; the map tests after the SES body changes
  step gpu_map_tests 240 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_forces.py tests/test_cuda_maps.py tests/test_frames_ses.py tests/test_calculator.py \
    tests/test_frames.py tests/test_apbs_input.py
  for s in svdw mol smol; do
    step "forces_cost_$s" 90 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda --frames 6 \
      --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 --json "$R/forces_cost_$s.json"
  done
elif [ "${1:-single}" = "s11d" ] || [ "${1:-single}" = "s11c" ]; then  # eleventh session: force sums on the GPU, the ionic lines in one call (s11d: line buffers sized per use)
  step gpu_force_tests 200 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_forces.py tests/test_calculator.py
  for s in svdw mol smol; do
    step "forces_cost_$s" 90 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda --frames 6 \
      --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 --json "$R/forces_cost_$s.json"
  done
elif [ "${1:-single}" = "s12" ]; then  # twelfth session: NVE drift, trilinear against cubic sampling of φ_rf
  # OpenMM 8.6.1 (cp312 wheel in .gpu/omm, carried); the six runs share the GPU and the cores
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/omm/*.whl
  # RUNS="how:seed ...". Seven at once (cubic 2024 1 2 3 4, linear 3 4: the first s12 call)
  # shared the GPU and the host at 0.3 s a step and were all cut at 540 s near step 1,500;
  # alone a run takes about 260 s (0.12 s a step), so give at most two
  for run in ${RUNS:-cubic:2024 linear:2024}; do
    how=${run%%:*}; seed=${run##*:}
    solvent=pb; [ "$how" = cubic ] && solvent=both  # OBC2 once a seed, beside the cubic run
    NUMBA_CACHE_DIR=/tmp/numba-cache-$how-$seed NUMBA_NUM_THREADS=2 timeout ${LIMIT:-540} \
      python3 benchmarks/nve_drift.py --solvent $solvent --steps 2000 --surface svdw --spacing 0.7 \
      --backend cuda --seed "$seed" --interpolation $how --json "$R/nve_${how}_$seed.json" \
      > "$R/nve_${how}_$seed.log" 2>&1 &
  done
  wait
  tail -n 3 "$R"/nve_*.log
elif [ "${1:-single}" = "s12b" ]; then  # twelfth session: GPU tests after the sampling change; exact forces in batches of 32
  step gpu_tests 300 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_forces.py tests/test_calculator.py tests/test_frames.py tests/test_frames_ses.py \
    tests/test_energy.py tests/test_interop_md.py
  for s in svdw mol smol; do
    step "forces_batch_$s" 150 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda \
      --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 32 --frames 64 --warmup 2 \
      --energy-engine auto --json "$R/forces_batch_$s.json"
  done
elif [ "${1:-single}" = "s12c" ]; then  # twelfth session: svdw exact forces in one batch of 32 (s12b's 64 frames ran past 150 s)
  step forces_batch_svdw 240 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda \
    --surface svdw --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 32 --frames 32 --warmup 2 \
    --energy-engine auto --json "$R/forces_batch_svdw.json"
elif [ "${1:-single}" = "s13" ]; then  # thirteenth session: the pending GPU tests, the svdw map on CuPy, 1025³
  step gpu_tests 180 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_cuda_maps.py tests/test_forces.py
  step mem_1025 200 python3 benchmarks/memory_per_node.py --backend cuda --sizes 1025 \
    --json "$R/mem_1025.json"
  step forces_batch_svdw 180 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda \
    --surface svdw --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 32 --frames 32 --warmup 2 \
    --energy-engine auto --json "$R/forces_batch_svdw.json"
elif [ "${1:-single}" = "s13b" ]; then  # thirteenth session: union line ends on the GPU; 1025³ past the grid limit
  step gpu_tests 150 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_cuda_maps.py tests/test_forces.py
  for s in svdw mol; do
    step "forces_batch_$s" 150 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda \
      --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 32 --frames 32 --warmup 2 \
      --energy-engine auto --json "$R/forces_batch_$s.json"
  done
  step mem_1025 140 python3 benchmarks/memory_per_node.py --backend cuda --sizes 1025 \
    --json "$R/mem_1025.json"
elif [ "${1:-single}" = "s13c" ]; then  # thirteenth session: every GPU test (the first full run since s10), 1025³ again
  step gpu_tests 470 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step mem_1025 100 python3 benchmarks/memory_per_node.py --backend cuda --sizes 1025 \
    --json "$R/mem_1025.json"
elif [ "${1:-single}" = "s13d" ]; then  # thirteenth session: SES line ends on the GPU
  step gpu_tests 200 python3 -m pytest -n 2 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    tests/test_cuda_maps.py tests/test_forces.py
  for s in mol smol; do
    step "forces_batch_$s" 130 python3 benchmarks/forces_cost.py --backend cuda --maps-backend cuda \
      --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 32 --frames 32 --warmup 2 \
      --energy-engine auto --json "$R/forces_batch_$s.json"
  done
elif [ "${1:-single}" = "s13e" ]; then  # thirteenth session: the stacked SES energies, repeat after repeat
  for s in mol smol; do
    step "stacked_repeat_$s" 190 python3 benchmarks/stacked_repeatability.py --backend cuda \
      --surface "$s" --repeats 3 --check 2
  done
elif [ "${1:-single}" = "s13f" ]; then  # thirteenth session: pbsolver bench with its MG-CG rows
  step bench 250 python3 -m pbsolver bench --sizes 256 --solve-sizes 129,257 --json "$R/bench.json"
elif [ "${1:-single}" = "s14" ]; then  # fourteenth session: every GPU test (coarse kernels from the shared bodies)
  step gpu_tests 480 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
elif [ "${1:-single}" = "s14b" ]; then  # fourteenth session: ω 1.2 on the GPU, pbsolver bench, MM/PBSA on the GPU
  step omega 150 python3 benchmarks/grid_mg_omega.py
  step bench 200 python3 -m pbsolver bench --sizes 256 --solve-sizes 129,257 --json "$R/bench.json"
  step mmpbsa_gpu 200 python3 benchmarks/mmpbsa_apbs.py --backend cuda --no-apbs --copies 4 \
    --batch 32 --json "$R/mmpbsa_gpu.json"
elif [ "${1:-single}" = "s15" ]; then  # fifteenth session: MM/PBSA frames (npz: no MDAnalysis there)
  # each part on request: MM=1 (frames from .gpu/fkbp_frames.npz), TESTS=1, BENCH=1
  [ -n "${MM:-}" ] && step mmpbsa_frames 200 python3 benchmarks/mmpbsa_frames.py run \
    .gpu/fkbp_frames.npz --backend cuda --copies ${COPIES:-8} --batch 32 --profile 45 \
    --json "$R/mmpbsa_frames_gpu.json"
  # SYNC=1: one batch profiled with every launch synchronous (GPU time lands on its launcher)
  [ -n "${SYNC:-}" ] && CUDA_LAUNCH_BLOCKING=1 step mmpbsa_sync_profile 200 python3 \
    benchmarks/mmpbsa_frames.py run .gpu/fkbp_frames.npz --backend cuda --frames 32 --batch 32 \
    --profile 60 --json "$R/mmpbsa_sync_profile.json"
  # TESTS=1: every GPU test; TESTS="tests/a.py tests/b.py": those files' GPU tests
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
  # SES="P1 P2 …": the SES step's launches, the line kernel cut into each count of pieces (0:
  # the default), with and without zone sampling; SES_THREADS="T1 T2 …": block sizes (0: default)
  [ -n "${SES:-}" ] && step ses_line_profile 240 python3 benchmarks/ses_line_profile.py \
    .gpu/fkbp_frames.npz --backend cuda --frames 32 --pieces ${SES} --threads ${SES_THREADS:-0} \
    $([ -n "${SES_ZONES:-}" ] || echo --no-zones) --json "$R/ses_line_profile.json"
  [ -n "${BENCH:-}" ] && step bench 200 python3 -m pbsolver bench --sizes 256 \
    --solve-sizes 129,257 --json "$R/bench.json"
elif [ "${1:-single}" = "s19" ]; then  # nineteenth session: device time per kernel (ncu)
  # each part on request: MM=1, NCU=1, KERNEL=regex, ORDER="on off", TESTS=1 | "files"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  echo "ncu: ${NCU:-none}"; [ -n "$NCU" ] && "$NCU" --version | tail -n 1
  MMRUN="benchmarks/mmpbsa_frames.py run .gpu/fkbp_frames.npz --backend cuda --batch 32"
  # ORDER: the SES line kernels of 32 complex frames, lines sorted by cost or not, one process
  [ -n "${ORDER:-}" ] && step ses_line_profile 240 python3 benchmarks/ses_line_profile.py \
    .gpu/fkbp_frames.npz --backend cuda --frames 32 --order ${ORDER} --repeats 3 \
    ${MIN_BLOCKS:+--min-blocks $MIN_BLOCKS} --json "$R/ses_line_profile.json"
  # MM: the wall time of MM/PBSA batches and of one batch alone (the one NCU profiles)
  [ -n "${MM:-}" ] && step mmpbsa_wall 200 python3 $MMRUN --frames 32 --copies ${COPIES:-4} \
    --cuda-profile --json "$R/mmpbsa_frames_gpu.json"
  if [ -n "${NCU_RUN:-}" ]; then  # NCU_RUN=1: that batch's kernels under ncu, a table by kernel
    step ncu_mmpbsa 400 "$NCU" --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --export "$R/mmpbsa" python3 $MMRUN --frames 32 \
      --copies 1 --cuda-profile
    "$NCU" --import "$R/mmpbsa.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum \
      > "$R/mmpbsa_ncu.csv"
    rm -f "$R/mmpbsa.ncu-rep"
    step ncu_summary 60 python3 benchmarks/ncu_kernels.py "$R/mmpbsa_ncu.csv" --top 45 \
      --json "$R/mmpbsa_kernels.json"
  fi
  # KERNEL=regex: the named kernels' first launches in the profiled batch, with ncu's sections
  [ -n "${KERNEL:-}" ] && step ncu_detail 300 "$NCU" --profile-from-start off \
    --clock-control none -k "regex:${KERNEL}" --launch-count ${LAUNCHES:-3} \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis --section WarpStateStats \
    python3 $MMRUN --frames 32 --copies 1 --cuda-profile
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
elif [ "${1:-single}" = "s20" ]; then  # twentieth session: the fused red-black sweep ("pair")
  # SWEEPS="100,256,384": every kernel shape of sweep_variants.py; NCU_PAIR=1: ncu's sections of
  # one launch of each kernel in NCU_KERNELS (default: "pair" and "point") at 256^3;
  # TESTS=1 | "files": the GPU tests
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  [ -n "${SWEEPS:-}" ] && step sweep_variants 400 python3 benchmarks/sweep_variants.py \
    --sizes "$SWEEPS" --no-launch --json "$R/sweep_variants.json"
  for k in ${NCU_PAIR:+${NCU_KERNELS:-rb_pair_kernel rb_point}}; do  # a 7th launch of each
    step "ncu_$k" 300 "$NCU" --clock-control none -k "regex:$k" --launch-count 1 \
      --launch-skip 6 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --metrics smsp__inst_executed.sum,smsp__inst_executed_op_global_ld.sum \
      python3 benchmarks/sweep_variants.py --sizes 256 --no-launch
  done
  [ -n "${BENCH:-}" ] && step bench 300 python3 -m pbsolver bench --sizes 256 \
    --solve-sizes 129,257 --json "$R/bench.json"
  # SOLVERS="129 257 513": time to rtol 1e-6 of one device-resident grid, with its host profile
  [ -n "${SOLVERS:-}" ] && step gpu_solvers 300 python3 benchmarks/gpu_solvers.py --sizes \
    $SOLVERS --methods sor mgcg mg-V --sor-max 129 --no-cupy-cg --profile ${PROFILE:-30} \
    --repeat ${REPEAT:-0} \
    --json "$R/gpu_solvers.json"
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
elif [ "${1:-single}" = "s28" ]; then  # twenty-eighth session: where the fused sweep pays
  # FUSED="96 128 …": one sweep two-pass and fused at each size; FUSED_SOLVES="129 161 193":
  # MG-CG with the default threshold, then with every level fused; BENCH=1; TESTS=files|1
  [ -n "${FUSED:-}" ] && step fused_threshold 200 python3 benchmarks/fused_threshold.py \
    --sizes $FUSED --json "$R/fused_threshold.json"
  for t in ${FUSED_SOLVES:+default 0}; do
    step "gpu_solvers_fused_$t" 150 python3 benchmarks/gpu_solvers.py --sizes $FUSED_SOLVES \
      --methods mgcg --no-cupy-cg --repeat 5 $([ "$t" = 0 ] && echo --fused-min-nodes 0) \
      --json "$R/gpu_solvers_fused_$t.json"
  done
  [ -n "${BENCH:-}" ] && step bench 200 python3 -m pbsolver bench --sizes 256 \
    --solve-sizes 129 --json "$R/bench.json"
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
elif [ "${1:-single}" = "s29" ]; then  # twenty-ninth session: the transfers in CUDA C
  # TRANSFERS="257 513": numba and CUDA C transfers and the copy floor; TESTS=files|1
  [ -n "${TRANSFERS:-}" ] && step transfer_kernels 200 python3 benchmarks/transfer_kernels.py \
    --sizes $TRANSFERS --json "$R/transfer_kernels.json"
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
elif [ "${1:-single}" = "s30" ]; then  # thirtieth session: two sweeps a launch
  # TESTS=files|1 first (the kernels' bits), then PAIRS="256 384 512": the pair kernel's variants
  # beside two one-sweep launches and the copy floor
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
  [ -n "${PAIRS:-}" ] && step double_sweep_variants 200 python3 \
    benchmarks/double_sweep_variants.py --sizes $PAIRS --json "$R/double_sweep_variants.json"
  # NCU_PAIRS="rb_fused rb_fused_twice": each kernel's 4th launch at 256³ under ncu, with the
  # per-instruction (SASS) counters as CSV
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  for k in ${NCU_PAIRS:-}; do
    step "ncu_$k" 200 "$NCU" --clock-control none -k "regex:^${k}\$" --launch-skip 3 \
      --launch-count 1 --import-source yes --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section InstructionStats --section SchedulerStats \
      --section SourceCounters --section MemoryWorkloadAnalysis --export "$R/$k" \
      python3 benchmarks/double_sweep_variants.py --sizes 256
    "$NCU" --import "$R/$k.ncu-rep" > "$R/ncu_${k}_details.txt" 2>&1
    "$NCU" --import "$R/$k.ncu-rep" --page source --csv --print-source sass \
      > "$R/ncu_${k}_sass.csv" 2>&1
    gzip -f "$R/ncu_${k}_sass.csv"; rm -f "$R/$k.ncu-rep"
  done
  [ -n "${BENCH:-}" ] && step bench 200 python3 -m pbsolver bench --sizes 256 \
    --solve-sizes 129 --json "$R/bench.json"
elif [ "${1:-single}" = "s21" ] || [ "${1:-single}" = "s22" ] || [ "${1:-single}" = "s23" ]; then
  # one solve's device time, by kernel, and the parts named below
  # LAUNCH=1: a launch's host time with CuPy arguments, as they are and as numba views (s27)
  [ -n "${LAUNCH:-}" ] && step launch_overhead 120 python3 benchmarks/launch_overhead.py \
    --json "$R/launch_overhead.json"
  # COULOMB=1: the general maps' CUDA φ_c kernels side by side (s23)
  [ -n "${COULOMB:-}" ] && step coulomb_map 200 python3 benchmarks/coulomb_map_cuda.py \
    --json "$R/coulomb_map.json"
  # NCU_SOLVE="257 513": one repeated MG-CG solve of each size under ncu, a table by kernel;
  # TESTS=1 | "files": the GPU tests
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  for n in ${NCU_SOLVE:-}; do
    step "ncu_solve_$n" 300 "$NCU" --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --export "$R/solve_$n" python3 benchmarks/gpu_solvers.py \
      --sizes "$n" --methods ${NCU_METHOD:-mgcg} --no-cupy-cg --repeat 1 --cuda-profile
    "$NCU" --import "$R/solve_$n.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum \
      > "$R/solve_${n}_ncu.csv"
    rm -f "$R/solve_$n.ncu-rep"
    step "ncu_summary_$n" 60 python3 benchmarks/ncu_kernels.py "$R/solve_${n}_ncu.csv" --top 40 \
      --json "$R/solve_${n}_kernels.json"
  done
  # KERNEL=regex: that kernel's launches in the profiled solve at NCU_N, with ncu's sections
  [ -n "${KERNEL:-}" ] && step ncu_detail 300 "$NCU" --profile-from-start off \
    --clock-control none -k "regex:${KERNEL}" --launch-count ${LAUNCHES:-2} \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section WarpStateStats python3 benchmarks/gpu_solvers.py \
    --sizes ${NCU_N:-257} --methods mgcg --no-cupy-cg --repeat 1 --cuda-profile
  # SOLVERS="129 257 513": time to rtol 1e-6, a new problem of the grid too (--new); with
  # BASE=1 first the library in .gpu/base (the commit before, copied there), then this one
  SOLVE_ARGS="--methods ${METHODS:-sor mgcg} --sor-max 129 --no-cupy-cg --new --repeat ${REPEAT:-3}"
  [ -n "${SOLVERS:-}" ] && [ -n "${BASE:-}" ] && PYTHONPATH=/tmp/site:$PWD/.gpu/base step \
    gpu_solvers_base 250 python3 benchmarks/gpu_solvers.py --sizes $SOLVERS $SOLVE_ARGS \
    --json "$R/gpu_solvers_base.json"
  [ -n "${SOLVERS:-}" ] && step gpu_solvers 250 python3 benchmarks/gpu_solvers.py --sizes \
    $SOLVERS $SOLVE_ARGS --profile ${PROFILE:-0} --json "$R/gpu_solvers.json"
  [ -n "${BENCH:-}" ] && step bench 300 python3 -m pbsolver bench --sizes 256 \
    --solve-sizes 129,257 --json "$R/bench.json"
  # FORCES="svdw mol": exact-forces frames against energy-only ones (colipase, 0.5 Å, one frame
  # a call), with BASE=1 the library in .gpu/base first
  for s in ${FORCES:-}; do
    FORCE_ARGS="--backend cuda --maps-backend cuda --surface $s --pqr data/1lpb_chainA.pqr --spacing 0.5"
    [ -n "${BASE:-}" ] && PYTHONPATH=/tmp/site:$PWD/.gpu/base step "forces_${s}_base" 200 \
      python3 benchmarks/forces_cost.py $FORCE_ARGS --json "$R/forces_${s}_base.json"
    step "forces_$s" 200 python3 benchmarks/forces_cost.py $FORCE_ARGS --json "$R/forces_$s.json"
  done
  # APBS="glob" [APBS_CPU=json of apbs_suite.py on the CPU, for APBS's times beside]: those
  # inputs through pb.apbs.run in one process (RUNS runs each, APBS_LIMIT s in all; BASE=1: the library in .gpu/base
  # first), and with OWN=1 through pbsolver apbs, one process an input
  if [ -n "${APBS:-}" ]; then
    [ -n "${BASE:-}" ] && PYTHONPATH=/tmp/site:$PWD/.gpu/base step apbs_inprocess_base 300 \
      python3 benchmarks/apbs_inprocess.py benchmarks/apbs_inputs --only "$APBS" \
      --skip "${APBS_SKIP:-}" --backend cuda --runs ${RUNS:-3} \
      ${APBS_CPU:+--apbs-json "$APBS_CPU"} --json "$R/apbs_inprocess_base.json"
    step apbs_inprocess ${APBS_LIMIT:-300} python3 benchmarks/apbs_inprocess.py benchmarks/apbs_inputs \
      --only "$APBS" --skip "${APBS_SKIP:-}" --backend cuda --runs ${RUNS:-3} \
      ${APBS_CPU:+--apbs-json "$APBS_CPU"} --json "$R/apbs_inprocess.json" \
      --markdown "$R/apbs_inprocess.md"
    [ -n "${OWN:-}" ] && step apbs_own_process 300 python3 benchmarks/apbs_suite.py \
      benchmarks/apbs_inputs --only "$APBS" --no-apbs --backend cuda \
      --json "$R/apbs_own_process.json" --markdown "$R/apbs_own_process.md"
  fi
  # ALT="GLOB ...": those inputs, the library in .gpu/base and this one alternately, ALT_ROUNDS
  # rounds (default 2) of one process each, RUNS runs an input; pairs of apbs_alt_{base,new}_R.json
  # for benchmarks/apbs_inprocess_compare.py (the spread between processes shows in the pairs)
  if [ -n "${ALT:-}" ]; then
    for r in $(seq 1 "${ALT_ROUNDS:-2}"); do for v in base new; do
      P=/tmp/site:$PWD; [ "$v" = base ] && P=/tmp/site:$PWD/.gpu/base
      set -f  # ALT holds several globs: split on spaces, not expanded by the shell
      # shellcheck disable=SC2086
      PYTHONPATH=$P step "apbs_alt_${v}_$r" "${ALT_LIMIT:-150}" python3 benchmarks/apbs_inprocess.py \
        benchmarks/apbs_inputs --only $ALT --backend cuda --runs "${RUNS:-5}" \
        --json "$R/apbs_alt_${v}_$r.json"
      set +f
    done; done
  fi
  [ -n "${TESTS:-}" ] && step gpu_tests 330 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
elif [ "${1:-single}" = "s33" ]; then  # thirty-third session: every GPU test, exact forces in batches
  # TESTS=1|files: the GPU tests; BATCH32="svdw mol smol": exact-forces frames against the fastest
  # energy-only ones in batches of 32 (BATCH=0: one frame a call; colipase, 0.5 Å); PROFILE="mol":
  # cProfile of the forces
  [ -n "${TESTS:-}" ] && step gpu_tests 340 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
  # with BASE=1 the library in .gpu/base first (the commit before), then this one, ROUNDS rounds
  for r in $(seq 1 "${ROUNDS:-1}"); do for s in ${BATCH32:-}; do for v in ${BASE:+base} new; do
    P=/tmp/site:$PWD; [ "$v" = base ] && P=/tmp/site:$PWD/.gpu/base
    PYTHONPATH=$P step "forces_batch_${s}_${v}_$r" 150 python3 benchmarks/forces_cost.py \
      --backend cuda --maps-backend cuda --surface "$s" --pqr data/1lpb_chainA.pqr --spacing 0.5 \
      --batch "${BATCH:-32}" --frames "${FRAMES:-32}" --warmup 2 --energy-engine auto \
      --json "$R/forces_batch_${s}_${v}_$r.json"
  done; done; done
  for s in ${PROFILE:-}; do
    step "forces_profile_$s" 120 python3 benchmarks/forces_profile.py --backend cuda --surface "$s" \
      --pqr data/1lpb_chainA.pqr \
      --frames 3 --top 45
    [ -n "${WHOLE:-}" ] && step "frame_profile_$s" 120 python3 benchmarks/forces_profile.py \
      --backend cuda --surface "$s" --pqr data/1lpb_chainA.pqr --frames 3 --top 60 --whole
  done
elif [ "${1:-single}" = "s34" ]; then  # thirty-fourth session: exact forces on the stacked engine
  # TESTS=1|files: the GPU tests; BATCH32="mol smol": exact-forces frames in batches of 32 with the
  # exact calculator on each engine of EXACT (default "general auto": before and after in one
  # call; the energy-only frames on the stacked engine); with BASE=1 also the stacked engine with
  # the library in .gpu/base (e.g. git archive 812d496 pbsolver); PROFILE="mol": cProfile of
  # one batch
  [ -n "${TESTS:-}" ] && step gpu_tests 340 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
  for r in $(seq 1 "${ROUNDS:-1}"); do for s in ${BATCH32:-}; do
    for e in ${EXACT:-general auto} ${BASE:+base}; do
      P=/tmp/site:$PWD; x=$e; [ "$e" = base ] && P=/tmp/site:$PWD/.gpu/base && x=auto
      PYTHONPATH=$P step "forces_batch_${s}_${e}_$r" 150 python3 benchmarks/forces_cost.py \
        --backend cuda --maps-backend cuda --surface "$s" --pqr data/1lpb_chainA.pqr \
        --spacing 0.5 --batch "${BATCH:-32}" --frames "${FRAMES:-32}" --warmup 2 \
        --energy-engine auto --exact-engine "$x" --json "$R/forces_batch_${s}_${e}_$r.json"
    done
  done; done
  for s in ${PROFILE:-}; do
    step "batch_profile_$s" 150 python3 benchmarks/forces_profile.py --backend cuda --surface "$s" \
      --pqr data/1lpb_chainA.pqr --batch 32 --frames 1 --warmup 1 --top 70
  done
elif [ "${1:-single}" = "s36" ]; then  # thirty-sixth session: the radial sums in shared tiles
  # TESTS as s34; RADIAL="base prev": the radial-sum kernels of the trees in .gpu/<name> and of
  # this tree, side by side; STAGES="mol": benchmarks/stacked_forces_stages.py; then s34's
  # BATCH32/EXACT/BASE/PROFILE
  [ -n "${TESTS:-}" ] && step gpu_tests 340 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider \
    -W ignore::Warning -rs $([ "${TESTS}" = 1 ] || echo "${TESTS}")
  for t in ${RADIAL:-} head; do
    P=/tmp/site:$PWD; [ "$t" = head ] || P=/tmp/site:$PWD/.gpu/$t
    [ "$t" = head ] || [ -e "$PWD/.gpu/$t/data" ] || ln -s "$PWD/data" "$PWD/.gpu/$t/data"
    PYTHONPATH=$P step "radial_$t" 60 python3 benchmarks/radial_sums_gpu.py --json "$R/radial_$t.json"
  done
  for s in ${STAGES:-}; do  # each stage of a batch's exact forces, the device idle around it
    step "stages_$s" 150 python3 benchmarks/stacked_forces_stages.py --pqr data/1lpb_chainA.pqr \
      --surface "$s" --batch 32 --batches 2 --warmup 2 --json "$R/stages_$s.json"
  done
  TESTS= bash "$0" s34
elif [ "${1:-single}" = "s38" ]; then  # thirty-eighth session: s36's parts, the ratio first
  # (a call cut off by its time limit still returns what ran): exact forces in batches of 32
  # for "mol" with this tree and with .gpu/base, the stage split, the GPU tests, "smol", and a
  # cProfile of one batch
  forces_batch mol head 32; forces_batch mol base 32 "$PWD/.gpu/base"
  step stages_mol 150 python3 benchmarks/stacked_forces_stages.py --pqr data/1lpb_chainA.pqr \
    --surface mol --batch 32 --batches 2 --warmup 2 --json "$R/stages_mol.json"
  step gpu_tests 200 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    ${TESTS:-tests/test_forces.py tests/test_frames_ses.py tests/test_frames.py tests/test_calculator.py}
  forces_batch smol head 32
  step batch_profile_mol 150 python3 benchmarks/forces_profile.py --backend cuda --surface mol \
    --pqr data/1lpb_chainA.pqr --batch 32 --frames 1 --warmup 1 --top 70
elif [ "${1:-single}" = "s39" ]; then  # thirty-ninth session: the ratio with and without
  # GROWTH_SLACK, side by side with .gpu/base, in alternating rounds (64 frames, two timed
  # batches of 32), the stage split of both trees, then the SES GPU tests
  forces_batch mol head_1 64; forces_batch mol base_1 64 "$PWD/.gpu/base"
  forces_batch mol head_2 64; forces_batch mol base_2 64 "$PWD/.gpu/base"
  stages head base
  step gpu_tests 150 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs \
    ${TESTS:-tests/test_frames_ses.py}
elif [ "${1:-single}" = "s40" ]; then  # next session: the ionic sums after 31aaa22 (chord
  # bodies that read a centre only for a chord) against .gpu/base (git archive 32558dc
  # pbsolver), alternating, base first; the stage split of both; the GPU memory of a batch
  forces_batch mol base_1 64 "$PWD/.gpu/base"; forces_batch mol head_1 64
  forces_batch mol base_2 64 "$PWD/.gpu/base"; forces_batch mol head_2 64
  stages base head
  step memory 80 python3 benchmarks/stacked_memory.py --backend cuda --pqr data/1lpb_chainA.pqr \
    --spacing 0.5 --batches 1 8 32 --surfaces mol
elif [ "${1:-single}" = "s40a" ]; then  # the adjoint at 10 × rtol (the default) against
  # adjoint_rtol = rtol, alternating; its error against the tolerance; the GPU memory again,
  # exact forces first, with the pool's parts
  FORCES_ARGS="--adjoint-rtol 1e-6" forces_batch mol adj6_1 64; forces_batch mol adj5_1 64
  FORCES_ARGS="--adjoint-rtol 1e-6" forces_batch mol adj6_2 64; forces_batch mol adj5_2 64
  stages head
  step adjoint_tolerance 150 python3 benchmarks/adjoint_tolerance.py --backend cuda \
    --pqr data/1lpb_chainA.pqr --spacing 0.5 --batch 8
  step memory 80 python3 benchmarks/stacked_memory.py --backend cuda --pqr data/1lpb_chainA.pqr \
    --spacing 0.5 --batches 1 8 32 --surfaces mol --kinds exact field
elif [ "${1:-single}" = "s40c" ]; then  # the radial sums' kernels per (periodic, mdh), LDS.128
  # and rsqrt, and the ionic column sums matching ends to the chords as cut, against .gpu/base
  # (git archive e26c968 pbsolver), alternating, base first; the
  # stage split of both; every GPU test; "smol" at this tree
  forces_batch mol base_1 64 "$PWD/.gpu/base"; forces_batch mol head_1 64
  forces_batch mol base_2 64 "$PWD/.gpu/base"; forces_batch mol head_2 64
  stages base head
  step gpu_tests 300 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  forces_batch smol head 64
elif [ "${1:-single}" = "s42" ]; then  # forty-first session's force kernels (μ, SES end
  # slopes, chord ends) and fortieth's radial and ionic sums against .gpu/base (git archive
  # e26c968 pbsolver), alternating, base first; the stage split of both; every GPU test
  forces_batch mol base_1 64 "$PWD/.gpu/base"; forces_batch mol head_1 64
  forces_batch mol base_2 64 "$PWD/.gpu/base"; forces_batch mol head_2 64
  stages base head
  step gpu_tests 300 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
elif [ "${1:-single}" = "s43" ]; then  # every GPU test; the stage split with .gpu/base (git
  # archive f8a5614 pbsolver) and this tree (the stack's Problem in one pass a face map)
  step gpu_tests 300 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  stages base head
  forces_batch mol head 64
elif [ "${1:-single}" = "s43b" ]; then  # the stacked memory estimate's GPU test; the stage
  # split with .gpu/base (git archive f8a5614 pbsolver), this tree and .gpu/var (this tree with
  # the ionic column sums added a candidate at a time); issue 19's ratio with base and this tree
  step memory_tests 120 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning \
    tests/test_memory_estimate.py
  stages base head var
  forces_batch mol base 64 "$PWD/.gpu/base"; forces_batch mol head 64
elif [ "${1:-single}" = "s43c" ]; then  # the ionic column sums a candidate at a time, now in
  # this tree: issue 19's ratio, and the GPU tests of the forces and the stacked SES engine
  forces_batch mol head 64
  step gpu_tests 240 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning \
    tests/test_forces.py tests/test_frames_ses.py tests/test_frames.py
elif [ "${1:-single}" = "s43d" ]; then  # the radial sums with two centres a thread (.gpu/var2,
  # this tree's variant) against this tree, alternating, the first run the machine's warm-up
  stages head var2 head var2
elif [ "${1:-single}" = "s44" ]; then  # the radial sums two centres a thread (this tree)
  # against .gpu/base (git archive 1834508 pbsolver): issue 19's ratio, base first; every GPU
  # test; the stage split; Nsight Compute on the SES slope, ionic end and radial sum kernels
  forces_batch mol base 64 "$PWD/.gpu/base"; forces_batch mol head 64
  step gpu_tests 300 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  stages head
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  [ -n "$NCU" ] && step ncu_forces 150 "$NCU" --clock-control none --launch-count 6 \
    --kernel-name regex:"ses_slopes|ion_end_sums|radial_sums" --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    python3 benchmarks/stacked_forces_stages.py --pqr data/1lpb_chainA.pqr --surface mol \
    --batch 32 --batches 1 --warmup 1
elif [ "${1:-single}" = "s44b" ]; then  # the SES slope kernel over the lines with ends only
  # and the ionic column sums with each merged end's chord from the merge, against .gpu/base
  # (git archive 730769e pbsolver): the stage split of this tree (the machine's warm-up), issue
  # 19's ratio alternating base first, the forces' GPU tests, a second round, the stage split
  # of base (the most needed first: a call cut off by its limit returns what ran)
  stages head
  forces_batch mol base_1 64 "$PWD/.gpu/base"; forces_batch mol head_1 64
  step gpu_tests 240 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning \
    tests/test_forces.py tests/test_frames_ses.py tests/test_frames.py
  forces_batch mol base_2 64 "$PWD/.gpu/base"; forces_batch mol head_2 64
  stages base
elif [ "${1:-single}" = "s40b" ]; then  # every GPU test
  step gpu_tests 300 python3 -m pytest -n 4 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
elif [ "${1:-single}" = "multi" ]; then
  step frames_profile 100 python3 benchmarks/frames_profile.py --batches 1 32 \
    --json "$R/frames_profile.json"
  step multi_gpu 540 python3 benchmarks/multi_gpu_batch.py --files 20 --grids-per-file 10 --n 129 \
    --gpus 2 --json "$R/multi_gpu.json" --workdir /tmp/mgpu
else
  step gpu_tests 240 python3 -m pytest -n 0 -m gpu -q -p no:cacheprovider -W ignore::Warning -rs
  step gpu_solvers 150 python3 benchmarks/gpu_solvers.py --sizes 129 257 --json "$R/gpu_solvers.json"
  step md_batch 100 python3 benchmarks/md_pipeline.py --backend cuda --skip-pipeline --batch 16 \
    --json "$R/md_batch.json"
  step md_frames 100 python3 benchmarks/md_pipeline.py --backend cuda --skip-throughput --frames 33 \
    --batch 8 --maps-backend cuda --json "$R/md_frames.json"
  step maps 60 python3 benchmarks/maps_timing.py --backend cuda --out "$R/maps_cuda.json"
fi
tar czf "$OUT/results-${1:-single}.tar.gz" -C "$OUT" r
