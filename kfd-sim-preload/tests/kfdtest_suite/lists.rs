//! The classification kept in the repository (`kfd-sim-preload/kfdtest/`)
//! and the verdict on a run against it.
//!
//! * `cannot-run.txt`: the tests that cannot run on this machine, each with
//!   its kind and the reason: `assembles-shader` (reaches the SP3
//!   assembler the source archive lacks; the run must end there),
//!   `executes-shader` (needs a GPU that runs shader code), `hardware`
//!   (needs a feature the simulated topology does not claim), `kernel`
//!   (needs an interface only AMD's out-of-tree driver has, which mainline
//!   amdkfd and so the simulated kernel lack), `host` (acts on the
//!   machine the tests run on: never started) or `endless` (loops until
//!   killed on any GPU, by design: never started).
//! * `expected/<machine>.txt`: every test of the suite with what it does
//!   on that machine: `pass`, `skip` (kfdtest skips it there, in its own
//!   words), `cannot-run` (the reason is in `cannot-run.txt`),
//!   `fail <why>` (a failure not yet fixed, with its cause) or
//!   `timing <why>` (passes alone, but within kfdtest's own waits or the
//!   run's time limit only when the machine is not loaded: a pass, a
//!   failure and a hang are all taken, anything else is not) or
//!   `intermittent <why>` (passes, but was seen to fail or hang now and
//!   then for a cause not found yet, which the reason names; taken like
//!   `timing`) or `crash <SIGNAL> <why>` (ends by that signal, for the
//!   reason given: kfdtest's own defect on this machine).
//!
//! A crash is never an accepted outcome of any other entry: a test that
//! ends by a signal is taken only when its entry names that signal and
//! why. A regression is a `pass` that did not pass, a `skip` that did
//! something else, a `cannot-run` test that passed (or, for
//! `assembles-shader`, ended anywhere but at the assembler), a `fail` that
//! passed, a `timing` test that was skipped, a `crash` that ended
//! otherwise, and a crash not listed as one: the list then no longer tells
//! the truth and must be updated.

use std::collections::BTreeMap;
use std::path::Path;

use super::run::Outcome;

/// Why a test cannot run here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotRun {
    AssemblesShader,
    ExecutesShader,
    Hardware,
    Kernel,
    Host,
    Endless,
}

impl CannotRun {
    fn parse(s: &str) -> Option<CannotRun> {
        Some(match s {
            "assembles-shader" => CannotRun::AssemblesShader,
            "executes-shader" => CannotRun::ExecutesShader,
            "hardware" => CannotRun::Hardware,
            "kernel" => CannotRun::Kernel,
            "host" => CannotRun::Host,
            "endless" => CannotRun::Endless,
            _ => return None,
        })
    }
}

/// What a machine's list expects of a test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    Pass,
    Skip,
    CannotRun,
    Fail(String),
    /// `timing` or `intermittent`, with the kind before the cause.
    Unsteady(String),
    /// Ends by this signal, for the reason given.
    Crash(i32, String),
}

/// The signals a `crash` entry may name.
const SIGNALS: [(&str, i32); 6] = [
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGABRT", libc::SIGABRT),
    ("SIGBUS", libc::SIGBUS),
    ("SIGFPE", libc::SIGFPE),
    ("SIGILL", libc::SIGILL),
    ("SIGTRAP", libc::SIGTRAP),
];

/// `(kind, reason)` per test, from `cannot-run.txt`.
pub type CannotRunList = BTreeMap<String, (CannotRun, String)>;

/// Lines that are not blank or `#` comments, with their numbers.
fn entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Parses `cannot-run.txt`: `Test.Name kind: reason`.
pub fn parse_cannot_run(text: &str, file: &Path) -> CannotRunList {
    let mut out = BTreeMap::new();
    for (n, line) in entries(text) {
        let (test, rest) = line
            .split_once(char::is_whitespace)
            .unwrap_or_else(|| panic!("{}:{n}: no kind after the test name", file.display()));
        let (kind, reason) = rest
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("{}:{n}: expected `kind: reason`", file.display()));
        let kind = CannotRun::parse(kind.trim()).unwrap_or_else(|| {
            panic!(
                "{}:{n}: unknown kind {kind:?} (assembles-shader, executes-shader, hardware, kernel, host, endless)",
                file.display()
            )
        });
        let reason = reason.trim();
        assert!(
            !reason.is_empty(),
            "{}:{n}: no reason given",
            file.display()
        );
        let old = out.insert(test.to_owned(), (kind, reason.to_owned()));
        assert!(
            old.is_none(),
            "{}:{n}: {test} is listed twice",
            file.display()
        );
    }
    out
}

/// Parses a machine's list: `Test.Name pass|skip|cannot-run|fail <why>|timing <why>|intermittent <why>|crash <SIGNAL> <why>`.
pub fn parse_expected(text: &str, file: &Path) -> BTreeMap<String, Expected> {
    let mut out = BTreeMap::new();
    for (n, line) in entries(text) {
        let mut words = line.splitn(3, char::is_whitespace);
        let test = words.next().unwrap_or_default();
        let what = words.next().unwrap_or_default();
        let rest = words.next().unwrap_or_default().trim();
        let expected = match what {
            "pass" => Expected::Pass,
            "skip" => Expected::Skip,
            "cannot-run" => Expected::CannotRun,
            "fail" | "timing" | "intermittent" | "crash" if rest.is_empty() => {
                panic!("{}:{n}: `{what}` needs its cause", file.display())
            }
            "fail" => Expected::Fail(rest.to_owned()),
            "timing" | "intermittent" => Expected::Unsteady(format!("{what}: {rest}")),
            "crash" => {
                let (signal, why) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                let Some(&(_, number)) = SIGNALS.iter().find(|(name, _)| *name == signal) else {
                    panic!(
                        "{}:{n}: `crash` names its signal first ({}), not {signal:?}",
                        file.display(),
                        SIGNALS.map(|(name, _)| name).join(", ")
                    )
                };
                assert!(
                    !why.trim().is_empty(),
                    "{}:{n}: `crash {signal}` needs its cause",
                    file.display()
                );
                Expected::Crash(number, why.trim().to_owned())
            }
            other => panic!(
                "{}:{n}: unknown expectation {other:?} (pass, skip, cannot-run, fail <why>, timing <why>, intermittent <why>, crash <SIGNAL> <why>)",
                file.display()
            ),
        };
        let old = out.insert(test.to_owned(), expected);
        assert!(
            old.is_none(),
            "{}:{n}: {test} is listed twice",
            file.display()
        );
    }
    out
}

/// What is wrong with `outcome` for a test `expected` to do otherwise
/// (`None`: it did what its list says).
pub fn judge(
    expected: &Expected,
    cannot_run: Option<&(CannotRun, String)>,
    outcome: &Outcome,
) -> Option<String> {
    let passed = *outcome == Outcome::Pass;
    if let Outcome::Crash(signal) = outcome {
        return match expected {
            Expected::Crash(listed, _) if listed == signal => None,
            Expected::Crash(_, _) => Some("crashed by another signal than its entry names".into()),
            _ => Some(
                "crashed, which no entry but `crash <SIGNAL> <why>` accepts: fix the cause, or \
                 list the crash and why it happens"
                    .into(),
            ),
        };
    }
    match expected {
        Expected::Pass if passed => None,
        Expected::Pass => Some("expected to pass (a regression)".into()),
        Expected::Skip if matches!(outcome, Outcome::Skip(_)) => None,
        Expected::Skip => Some("expected kfdtest to skip it".into()),
        Expected::CannotRun => match cannot_run {
            None => Some("listed cannot-run here but absent from cannot-run.txt".into()),
            Some((CannotRun::AssemblesShader, _))
                if !matches!(outcome, Outcome::NoAssembler | Outcome::Skip(_)) =>
            {
                Some("listed as assembling a shader but did not reach the assembler".into())
            }
            Some(_) if passed => Some("listed cannot-run but passed: list it as pass".into()),
            Some(_) => None,
        },
        Expected::Fail(_) if passed => Some("listed as failing but passed: list it as pass".into()),
        Expected::Fail(_) => None,
        Expected::Unsteady(_) => match outcome {
            Outcome::Pass | Outcome::Fail(_) | Outcome::Hang(_) => None,
            _ => Some(
                "listed as timing-bound or intermittent, but neither passed, failed nor hung"
                    .into(),
            ),
        },
        Expected::Crash(_, _) if passed => {
            Some("listed as crashing but passed: list it as pass".into())
        }
        Expected::Crash(_, _) => Some("listed as crashing but did not crash".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_judge() {
        let f = Path::new("x");
        let cr = parse_cannot_run(
            "# c\nA.B assembles-shader: uses SP3\nA.C host: no suspend\nA.E endless: loops\n",
            f,
        );
        assert_eq!(cr["A.B"].0, CannotRun::AssemblesShader);
        assert_eq!(cr["A.E"].0, CannotRun::Endless);
        let ex = parse_expected("A.A pass\nA.B cannot-run\nA.D fail queue execution\n", f);
        assert_eq!(ex["A.D"], Expected::Fail("queue execution".into()));
        let fail = Outcome::Fail("x".into());
        assert!(judge(&ex["A.A"], None, &Outcome::Pass).is_none());
        assert!(judge(&ex["A.A"], None, &fail).is_some());
        assert!(judge(&ex["A.B"], cr.get("A.B"), &Outcome::NoAssembler).is_none());
        assert!(judge(&ex["A.B"], cr.get("A.B"), &fail).is_some());
        assert!(judge(&Expected::CannotRun, cr.get("A.C"), &fail).is_none());
        assert!(judge(&Expected::CannotRun, cr.get("A.C"), &Outcome::Pass).is_some());
        assert!(judge(&ex["A.D"], None, &Outcome::Hang(Default::default())).is_none());
        assert!(judge(&ex["A.D"], None, &Outcome::Pass).is_some());
        let ex = parse_expected("A.T timing 2 s wait\n", f);
        assert_eq!(ex["A.T"], Expected::Unsteady("timing: 2 s wait".into()));
        assert!(judge(&ex["A.T"], None, &Outcome::Pass).is_none());
        assert!(judge(&ex["A.T"], None, &fail).is_none());
        assert!(judge(&ex["A.T"], None, &Outcome::Hang(Default::default())).is_none());
        assert!(judge(&ex["A.T"], None, &Outcome::NoAssembler).is_some());
        let ex = parse_expected("A.I intermittent a race\n", f);
        assert!(judge(&ex["A.I"], None, &Outcome::Pass).is_none());
        assert!(judge(&ex["A.I"], None, &Outcome::Hang(Default::default())).is_none());
        assert!(judge(&ex["A.I"], None, &Outcome::Skip("x".into())).is_some());
    }

    #[test]
    fn a_crash_is_taken_only_from_an_entry_naming_it() {
        let f = Path::new("x");
        let cr = parse_cannot_run("A.C hardware: no ECC\nA.S assembles-shader: SP3\n", f);
        let segv = Outcome::Crash(libc::SIGSEGV);
        let abrt = Outcome::Crash(libc::SIGABRT);
        // No other entry takes a crash: not failing, not cannot-run, not
        // unsteady.
        for (entry, listed) in [
            ("A.F fail a cause", None),
            ("A.C cannot-run", cr.get("A.C")),
            ("A.S cannot-run", cr.get("A.S")),
            ("A.T timing a wait", None),
            ("A.P pass", None),
        ] {
            let ex = parse_expected(entry, f);
            let (_, e) = ex.iter().next().unwrap();
            assert!(judge(e, listed, &segv).is_some(), "{entry} took a crash");
        }
        let ex = parse_expected("A.X crash SIGABRT kfdtest rethrows outside a handler\n", f);
        assert_eq!(
            ex["A.X"],
            Expected::Crash(libc::SIGABRT, "kfdtest rethrows outside a handler".into())
        );
        assert!(judge(&ex["A.X"], None, &abrt).is_none());
        assert!(judge(&ex["A.X"], None, &segv).is_some());
        assert!(judge(&ex["A.X"], None, &Outcome::Pass).is_some());
        assert!(judge(&ex["A.X"], None, &Outcome::Fail("x".into())).is_some());
        for bad in [
            "A.X crash\n",
            "A.X crash SIGABRT\n",
            "A.X crash 6 a cause\n",
        ] {
            let parsed = std::panic::catch_unwind(|| parse_expected(bad, f));
            assert!(parsed.is_err(), "{bad:?} was accepted");
        }
    }
}
