use super::*;

fn windows(durations: &[u64]) -> (Vec<Span>, Vec<String>) {
    let mut t = 1_000;
    let w = durations
        .iter()
        .map(|&d| {
            let s = (t, t + d);
            t += d;
            s
        })
        .collect();
    (w, (0..durations.len()).map(|i| format!("ProfilerStep#{i}")).collect())
}

/// Evidence of a model's kernel (id 1) run in every step of `w`.
fn kernel_every_step(w: &[Span]) -> Evidence {
    let mut ev = Evidence::new();
    for win in w {
        ev.kernel(1, win.0 + 10);
    }
    ev
}

#[test]
fn slow_first_steps_are_warmup_and_a_steady_run_has_none() {
    // The H100 transformer run: 315 and 51 ms first steps, then about 30 ms each.
    let mut d = vec![315_000_000, 51_000_000];
    d.extend([30_000_000u64, 31_000_000, 29_000_000].iter().cycle().take(20));
    let (w, names) = windows(&d);
    let r = detect(&w, &names, &Evidence::new());
    assert_eq!((r.steps, r.ns), (2, 366_000_000));
    assert_eq!(r.detail[0].name, "ProfilerStep#0");
    let (w, names) = windows(&[30, 31, 29, 30, 30, 32]);
    assert_eq!(detect(&w, &names, &Evidence::new()).steps, 0);
    // Too few steps to tell a pattern.
    let (w, names) = windows(&[300, 30]);
    assert_eq!(detect(&w, &names, &Evidence::new()).steps, 0);
}

#[test]
fn autotuning_kernels_and_allocator_growth_make_warmup_at_steady_speed() {
    let (w, names) = windows(&[100, 100, 100, 100, 100, 100, 100, 100]);
    let mut ev = Evidence::new();
    for (i, win) in w.iter().enumerate() {
        ev.kernel(1, win.0 + 10); // the model's kernel, every step
        if i == 0 {
            ev.kernel(2, win.0 + 20); // an autotuning candidate, step 0 only
            ev.alloc_call(win.0 + 5);
        }
        if i == 0 || i == 3 {
            ev.kernel(4, win.0 + 30); // the program's own work, run again by a step kept, never steadily
        }
        if i == 1 {
            ev.alloc_call(win.0 + 5); // the allocator still growing
            ev.alloc_call(win.0 + 6);
        }
    }
    let r = detect(&w, &names, &ev);
    assert_eq!(r.steps, 2, "{r:?}");
    assert_eq!((r.detail[0].kernels_only_here, r.detail[0].alloc_calls), (2, 1));
    assert_eq!((r.detail[1].kernels_only_here, r.detail[1].alloc_calls), (0, 2));
    // Only the candidate is set-up; the other kernel is work a later step does again.
    assert_eq!((&r.example_kernels, &r.kernels_run_again), (&vec![2], &vec![4]));
    let said = r.describe();
    assert!(said.contains("1 kernel that only the warm-up runs") && said.contains("1 kernel run for the"), "{said}");
    // A program that allocates in every step: allocations tell nothing.
    let mut ev = Evidence::new();
    for win in &w {
        ev.alloc_call(win.0 + 5);
    }
    assert_eq!(detect(&w, &names, &ev).steps, 0);
}

#[test]
fn a_later_step_that_compiles_new_kernels_is_named_with_its_cost() {
    // 12 steady steps of 100; step 8 recompiles: 400, and runs kernel 3 from then on.
    let mut d = vec![100u64; 12];
    d[8] = 400;
    let (w, names) = windows(&d);
    let mut ev = Evidence::new();
    for (i, win) in w.iter().enumerate() {
        ev.kernel(1, win.0 + 10);
        if i >= 8 {
            ev.kernel(3, win.0 + 350.min(win.1 - win.0 - 1));
        }
    }
    let r = detect(&w, &names, &ev);
    assert_eq!(r.steps, 0);
    assert_eq!(r.later.len(), 1, "{r:?}");
    let f = &r.later[0];
    assert_eq!((f.name.as_str(), f.cost_ns, f.new_kernels, &f.kernel_ids), ("ProfilerStep#8", 300, 1, &vec![3]));
    // New kernels at steady speed (a second model's first call, cheap) or a slow step with none: neither.
    d[8] = 100;
    let (w, names) = windows(&d);
    assert!(detect(&w, &names, &ev).later.is_empty());
    d[8] = 400;
    let (w, names) = windows(&d);
    let ev = kernel_every_step(&w);
    assert!(detect(&w, &names, &ev).later.is_empty());
}

/// A graph captured lazily: a later step that instantiates one and is slow is named with its cost, with no
/// kernel new to it; one at steady speed too, where few steps capture (cost 0); a slow step without one is not,
/// and nor are the steps of a loop that instantiates in most steps (it re-captures: `graph_capture`'s).
#[test]
fn a_later_step_that_captures_a_graph_is_named_with_its_cost() {
    let mut d = vec![100u64; 12];
    d[9] = 350;
    let (w, names) = windows(&d);
    let mut ev = kernel_every_step(&w);
    ev.graph_setup(w[9].0 + 20, false);
    ev.graph_setup(w[9].0 + 200, true);
    let r = detect(&w, &names, &ev);
    assert_eq!(r.later.len(), 1, "{r:?}");
    let f = &r.later[0];
    assert_eq!((f.name.as_str(), f.cost_ns, f.new_kernels, f.graphs_instantiated), ("ProfilerStep#9", 250, 0, 1));
    d[9] = 100;
    let (w, names) = windows(&d);
    let mut ev = kernel_every_step(&w);
    ev.graph_setup(w[9].0 + 50, true);
    let r = detect(&w, &names, &ev);
    let at_speed: Vec<(&str, u64)> = r.later.iter().map(|f| (f.name.as_str(), f.cost_ns)).collect();
    assert_eq!(at_speed, [("ProfilerStep#9", 0)], "at steady speed: {r:?}");
    let mut plain = kernel_every_step(&w);
    d[9] = 350;
    let (w, names) = windows(&d);
    assert!(detect(&w, &names, &plain).later.is_empty(), "slow, without a capture");
    let (w, names) = windows(&[100; 12]);
    for win in &w[2..] {
        plain.graph_setup(win.0 + 20, true);
    }
    assert!(detect(&w, &names, &plain).later.is_empty(), "a capture every step");
}

/// A graph instantiated while the warm-up still ran (a loaded machine slowed the steps up to it) is named by the
/// warm-up, not lost: its step says so and the warm-up's line counts it.
#[test]
fn a_graph_captured_in_the_warmup_is_named_by_it() {
    let mut d = vec![100u64; 12];
    d[0] = 400;
    d[1] = 300;
    let (w, names) = windows(&d);
    let mut ev = kernel_every_step(&w);
    ev.graph_setup(w[1].0 + 200, true);
    let r = detect(&w, &names, &ev);
    assert_eq!(r.steps, 2, "{r:?}");
    let counts: Vec<u64> = r.detail.iter().map(|d| d.graphs_instantiated).collect();
    assert_eq!(counts, [0, 1]);
    assert!(r.later.is_empty(), "{r:?}");
    assert!(r.describe().starts_with("1 CUDA graph captured and instantiated; up to 4.0x"), "{}", r.describe());
}

#[test]
fn a_servers_steps_are_compared_with_their_own_kind_told_by_what_they_launch() {
    // An unnamed server: a pre-serving warm-up (300, prefill and replays), the first prefill (eager, 90),
    // then decodes (graph replays, 30) with a mixed iteration (both, 100) every fourth step.
    let mut d = vec![300u64, 90];
    let mut launch = vec![(true, true), (false, true)];
    for i in 0..20 {
        let mixed = i % 4 == 3;
        d.push(if mixed { 100 } else { 30 });
        launch.push((true, mixed));
    }
    let (w, names) = windows(&d);
    let (w, names) = (w, names.iter().map(|_| "step".to_string()).collect::<Vec<_>>());
    let mut ev = Evidence::new();
    ev.graph_setup(0, false);
    for (win, &(graph, eager)) in w.iter().zip(&launch) {
        if graph {
            ev.graph_replays.push(win.0 + 1);
        }
        if eager {
            ev.eager_kernels.push(win.0 + 2);
        }
    }
    let r = detect(&w, &names, &ev);
    // The prefill (3x a decode) is no warm-up: no steady step is eager alone, and the graphs were captured
    // before it, so it is other work than theirs, compared with nothing; the pre-serving warm-up is 3x a mixed
    // iteration.
    assert_eq!(r.steps, 1, "{r:?}");
    assert_eq!((r.detail[0].kind, r.detail[0].compared_with_ns), (Some("graph replay + eager"), 100));
    let kinds: Vec<(&str, u64)> = r.steady_by_kind.iter().map(|k| (k.kind, k.steady_step_ns)).collect();
    assert_eq!(kinds, vec![("graph replay", 30), ("graph replay + eager", 100)]);
    // Without what each step launched (more than the cap), every step is compared with all steps.
    ev.eager_kernels = Times(None);
    let r = detect(&w, &names, &ev);
    assert_eq!((r.steps, r.steady_by_kind.len()), (2, 0), "{r:?}");
    assert!(r.detail[1].kind.is_none());
}

#[test]
fn named_kinds_the_steady_half_never_runs_are_not_slow_by_time() {
    // A batch prefilled first (3 steps at 10x), then decoded: the engine says the prefills are other work.
    let mut d = vec![300u64; 3];
    d.extend([30u64; 12]);
    let (w, _) = windows(&d);
    let names: Vec<String> = (0..d.len()).map(|i| if i < 3 { "prefill" } else { "decode" }.to_string()).collect();
    let r = detect(&w, &names, &Evidence::new());
    assert_eq!(r.steps, 0, "{r:?}");
}

#[test]
fn eager_steps_are_warmup_before_the_loop_is_captured_and_other_work_after() {
    // Eager steps at 3x, then graph replays alone.
    let mut d = vec![90u64, 90, 90];
    d.extend([30u64; 12]);
    let (w, names) = windows(&d);
    let mut ev = Evidence::new();
    for (i, win) in w.iter().enumerate() {
        if i < 3 {
            ev.eager_kernels.push(win.0 + 1);
        } else {
            ev.graph_replays.push(win.0 + 1);
        }
    }
    // torch.compile's reduce-overhead: it warms up eagerly, then records the graph in the third step.
    ev.graph_setup(w[2].0 + 5, false);
    let r = detect(&w, &names, &ev);
    assert_eq!(r.steps, 3, "{r:?}");
    assert_eq!((r.detail[0].kind, r.detail[0].compared_with_ns), (Some("eager"), 30));
    // An unnamed offline batch: the decode graphs captured at start-up (or before the trace began), then
    // the batch prefilled eagerly and decoded. The prefills are other work than a decode, not slow ones.
    for setup in [Some(0), None] {
        ev.first_graph_setup = setup;
        let r = detect(&w, &names, &ev);
        assert_eq!(r.steps, 0, "{setup:?}: {r:?}");
    }
}

#[test]
fn warmup_never_takes_more_than_half_the_steps() {
    let (w, names) = windows(&[900, 800, 700, 600, 500, 400, 300, 200]);
    let r = detect(&w, &names, &Evidence::new());
    assert!(r.steps <= 4, "{r:?}");
}

/// CUDA's set-up inside a warm-up step is put down to it, once where two launching threads set up at once, and
/// not at all on a thread that launches nothing (a DataLoader worker creating its own stream); the line names it.
#[test]
fn cuda_setup_inside_a_warmup_step_is_measured_and_named() {
    let mut d = vec![300_000_000u64];
    d.extend([30_000_000u64; 9]);
    let (w, names) = windows(&d);
    let mut r = detect(&w, &names, &kernel_every_step(&w));
    assert_eq!(r.steps, 1);
    let ms = 1_000_000;
    let seen = |from: u64, to: u64, tid: u32, call: u32, first_launch: bool| SetupSeen {
        span: (w[0].0 + from * ms, w[0].0 + to * ms),
        tid,
        call,
        first_launch,
    };
    let seen = [
        seen(0, 100, 1, 7, false),
        seen(50, 120, 2, 7, false),
        seen(150, 160, 1, 8, true),
        seen(170, 180, 1, 8, true),
        seen(200, 290, 3, 7, false),
        seen(310, 320, 1, 7, false), // in the next step, which is steady
    ];
    let launchers: rustc_hash::FxHashSet<u32> = [1, 2].into_iter().collect();
    r.account_cuda_setup(
        &seen,
        &launchers,
        |id| if id == 7 { "cudaStreamCreateWithFlags" } else { "cudaLaunchKernel" },
    );
    assert_eq!(r.detail[0].cuda_setup_ns, 140 * ms);
    let line = r.describe();
    assert!(
        line.contains(
            "CUDA set itself up for 140.00 ms of it (2 kernels' first launches, their modules loaded; \
             cudaStreamCreateWithFlags x2)"
        ),
        "{line}"
    );
}
