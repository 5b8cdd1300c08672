//! The runner of a test binary with its own `main` (`harness = false`,
//! where the binary starts itself again in another role), answering the
//! command line as libtest does, so `cargo test NAME`, `cargo test -- --list`,
//! `--exact`, `--skip` and `--ignored` mean what they mean for every other
//! test binary.
//!
//! Tests run one at a time on the calling thread (they start processes of
//! their own); a panic fails the test and the binary exits with libtest's
//! status 101. A test that calls [`crate::skip`] and returns is reported as
//! skipped, with its reason, and never counted as passed.
//!
//! Options libtest takes that change nothing here (`--nocapture`,
//! `--test-threads`, `--color`, `-Z`, ...) are accepted; an option libtest
//! does not know is an error, as there.

use std::io::Write;
use std::time::Instant;

/// A test: its name as `--list` prints it, and its body.
pub type Test = (&'static str, fn());

/// libtest's exit status for failed tests and for a bad command line.
pub const FAILURE_STATUS: i32 = 101;

/// Runs the tests `std::env::args()` chooses among `tests` and exits.
pub fn run(tests: &[Test]) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match Plan::parse(&args, tests) {
        Ok(plan) => plan.execute(tests, &mut std::io::stdout()),
        Err(message) => {
            eprintln!("error: {message}");
            FAILURE_STATUS
        }
    };
    std::process::exit(status)
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// `--list`: print the chosen tests instead of running them.
    pub list: bool,
    /// `--format terse` or `-q`: no summary after `--list`.
    pub terse: bool,
    /// Indices of the chosen tests, in order.
    pub chosen: Vec<usize>,
}

/// Options that take a value and change nothing here.
const IGNORED_WITH_VALUE: &[&str] = &[
    "--test-threads",
    "--color",
    "--logfile",
    "-Z",
    "--shuffle-seed",
];
/// Flags that change nothing here.
const IGNORED_FLAGS: &[&str] = &[
    "--nocapture",
    "--no-capture",
    "--show-output",
    "--test",
    "--report-time",
    "--ensure-time",
    "--shuffle",
    "--force-run-in-process",
    "--exclude-should-panic",
];

impl Plan {
    /// Reads libtest's command line; an error names what is wrong.
    pub fn parse(args: &[String], tests: &[Test]) -> Result<Plan, String> {
        let mut list = false;
        let mut terse = false;
        let mut exact = false;
        let mut ignored_only = false;
        let mut benches_only = false;
        let mut filters: Vec<&str> = Vec::new();
        let mut skips: Vec<&str> = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let (option, inline) = match arg.split_once('=') {
                Some((o, v)) if o.starts_with('-') => (o, Some(v)),
                _ => (arg.as_str(), None),
            };
            let mut value = |name: &str| -> Result<&str, String> {
                match inline {
                    Some(v) => Ok(v),
                    None => args
                        .next()
                        .map(String::as_str)
                        .ok_or_else(|| format!("option '{name}' requires a value")),
                }
            };
            match option {
                "--list" => list = true,
                "--exact" => exact = true,
                "--ignored" => ignored_only = true,
                "--include-ignored" => {}
                "--bench" => benches_only = true,
                "-q" | "--quiet" => terse = true,
                "--format" => terse = value(option)? == "terse",
                "--skip" => skips.push(value(option)?),
                "-h" | "--help" => {
                    return Err("this test binary takes libtest's options: [FILTER...] \
                                [--exact] [--skip FILTER] [--list] [--ignored]"
                        .into())
                }
                o if IGNORED_WITH_VALUE.contains(&o) => {
                    value(o)?;
                }
                o if IGNORED_FLAGS.contains(&o) => {}
                o if o.starts_with('-') => return Err(format!("Unrecognized option: '{o}'")),
                _ => filters.push(arg),
            }
        }
        let matches = |name: &str, filter: &str| {
            if exact {
                name == filter
            } else {
                name.contains(filter)
            }
        };
        // None of these tests is ignored and none is a benchmark.
        let chosen = if ignored_only || benches_only {
            Vec::new()
        } else {
            (0..tests.len())
                .filter(|&i| {
                    let name = tests[i].0;
                    (filters.is_empty() || filters.iter().any(|f| matches(name, f)))
                        && !skips.iter().any(|s| matches(name, s))
                })
                .collect()
        };
        Ok(Plan {
            list,
            terse,
            chosen,
        })
    }

    /// Lists or runs the chosen tests, printing as libtest does; returns
    /// the exit status.
    pub fn execute(&self, tests: &[Test], out: &mut dyn Write) -> i32 {
        if self.list {
            for &i in &self.chosen {
                let _ = writeln!(out, "{}: test", tests[i].0);
            }
            if !self.terse {
                let n = self.chosen.len();
                let _ = writeln!(out, "\n{n} test{}, 0 benchmarks", plural(n));
            }
            return 0;
        }
        let start = Instant::now();
        let n = self.chosen.len();
        let _ = writeln!(out, "\nrunning {n} test{}", plural(n));
        let mut failed = Vec::new();
        let mut passed = 0;
        let mut skipped = 0;
        for &i in &self.chosen {
            let (name, body) = tests[i];
            let _ = writeln!(out, "test {name} ...");
            let _ = out.flush();
            let _ = crate::take_skip();
            let outcome = std::panic::catch_unwind(body);
            let skip = crate::take_skip();
            match (outcome, skip) {
                (Err(_), _) => {
                    let _ = writeln!(out, "test {name} ... FAILED");
                    failed.push(name);
                }
                (Ok(()), Some(why)) => {
                    let _ = writeln!(out, "test {name} ... skipped: {why}");
                    skipped += 1;
                }
                (Ok(()), None) => {
                    let _ = writeln!(out, "test {name} ... ok");
                    passed += 1;
                }
            }
            let _ = out.flush();
        }
        if !failed.is_empty() {
            let _ = writeln!(out, "\nfailures:");
            for name in &failed {
                let _ = writeln!(out, "    {name}");
            }
        }
        let verdict = if !failed.is_empty() {
            "FAILED"
        } else if skipped > 0 {
            "skipped"
        } else {
            "ok"
        };
        let _ = writeln!(
            out,
            "\ntest result: {verdict}. {passed} passed; {} failed; {skipped} skipped; \
             0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
            failed.len(),
            tests.len() - n,
            start.elapsed().as_secs_f64()
        );
        let _ = out.flush();
        if failed.is_empty() {
            0
        } else {
            FAILURE_STATUS
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes() {}
    fn fails() {
        panic!("this test fails");
    }
    fn skips() {
        crate::skip("nothing to test with");
    }

    const TESTS: &[Test] = &[
        ("alpha_passes", passes),
        ("alpha_fails", fails),
        ("beta_skips", skips),
    ];

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Plan::parse(&args, TESTS)
    }

    fn chosen(args: &[&str]) -> Vec<usize> {
        plan(args).unwrap().chosen
    }

    #[test]
    fn filters_choose_as_libtest_does() {
        assert_eq!(chosen(&[]), [0, 1, 2]);
        assert_eq!(chosen(&["alpha"]), [0, 1]);
        assert_eq!(chosen(&["alpha", "skips"]), [0, 1, 2]);
        assert_eq!(chosen(&["--exact", "alpha"]), Vec::<usize>::new());
        assert_eq!(chosen(&["alpha_fails", "--exact"]), [1]);
        assert_eq!(chosen(&["--skip", "fails"]), [0, 2]);
        assert_eq!(chosen(&["--skip=fails", "alpha"]), [0]);
        assert_eq!(chosen(&["--ignored"]), Vec::<usize>::new());
        assert_eq!(chosen(&["--include-ignored", "beta"]), [2]);
        assert_eq!(
            chosen(&[
                "--nocapture",
                "--test-threads",
                "1",
                "--color=never",
                "-Z",
                "x",
                "beta"
            ]),
            [2]
        );
    }

    #[test]
    fn a_bad_command_line_is_an_error() {
        assert!(plan(&["--frobnicate"])
            .unwrap_err()
            .contains("--frobnicate"));
        assert!(plan(&["--skip"]).unwrap_err().contains("requires a value"));
    }

    #[test]
    fn list_prints_the_chosen_tests() {
        let mut out = Vec::new();
        let status = plan(&["--list", "alpha"]).unwrap().execute(TESTS, &mut out);
        assert_eq!(status, 0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "alpha_passes: test\nalpha_fails: test\n\n2 tests, 0 benchmarks\n"
        );
        let mut out = Vec::new();
        plan(&["--list", "--format", "terse"])
            .unwrap()
            .execute(TESTS, &mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3);
    }

    #[test]
    fn a_failure_fails_the_run_and_a_skip_is_no_pass() {
        let mut out = Vec::new();
        let status = plan(&[]).unwrap().execute(TESTS, &mut out);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(status, FAILURE_STATUS, "{out}");
        assert!(out.contains("test alpha_passes ... ok\n"), "{out}");
        assert!(out.contains("test alpha_fails ... FAILED\n"), "{out}");
        assert!(out.contains("failures:\n    alpha_fails\n"), "{out}");
        if crate::under_ci() {
            // Under CI the skip is a failure of its own.
            assert!(out.contains("test beta_skips ... FAILED\n"), "{out}");
            assert!(
                out.contains("test result: FAILED. 1 passed; 2 failed; 0 skipped"),
                "{out}"
            );
        } else {
            assert!(
                out.contains("test beta_skips ... skipped: nothing to test with\n"),
                "{out}"
            );
            assert!(
                out.contains("test result: FAILED. 1 passed; 1 failed; 1 skipped"),
                "{out}"
            );
        }

        let mut out = Vec::new();
        let status = plan(&["beta"]).unwrap().execute(TESTS, &mut out);
        let out = String::from_utf8(out).unwrap();
        if crate::under_ci() {
            assert_eq!(status, FAILURE_STATUS, "{out}");
        } else {
            assert_eq!(status, 0, "{out}");
            assert!(!out.contains("... ok"), "a skip is not a pass: {out}");
            assert!(out.contains("test result: skipped. 0 passed; 0 failed; 1 skipped; 0 ignored; 0 measured; 2 filtered out"), "{out}");
        }
    }
}
