//! The checker's report: one verdict and one reason per check, as a table and as JSON.

use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Holds,
    FallsShort,
    NotApplicable,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::FallsShort => "falls short",
            Verdict::NotApplicable => "not applicable",
        }
    }
}

#[derive(Clone, Debug)]
pub struct CheckResult {
    /// Stable identifier, for scripts reading the JSON.
    pub id: &'static str,
    /// What the endpoint should do.
    pub title: &'static str,
    pub verdict: Verdict,
    pub why: String,
}

#[derive(Debug)]
pub struct Report {
    pub method: String,
    pub url: String,
    /// Whether two executions of the same request give different answers (`None` when the
    /// checker could not find out).
    pub distinguishable: Option<bool>,
    pub checks: Vec<CheckResult>,
}

impl Report {
    pub fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }

    /// Every applicable check holds (and there is at least one).
    pub fn passed(&self) -> bool {
        self.count(Verdict::FallsShort) == 0 && self.count(Verdict::Holds) > 0
    }

    pub fn table(&self) -> String {
        let mut out = format!("idempotency-edge-check: {} {}\n", self.method, self.url);
        out.push_str(match self.distinguishable {
            Some(true) => "executions: told apart by their answers (two fresh keys got different answers)\n",
            Some(false) => {
                "executions: cannot be told apart (two fresh keys got the same answer); checks that count executions are not applicable\n"
            }
            None => "executions: unknown (no successful first answer)\n",
        });
        out.push('\n');
        let width = self.checks.iter().map(|c| c.id.len()).max().unwrap_or(5).max(5);
        out.push_str(&format!("{:<width$}  {:<14}  WHY\n", "CHECK", "RESULT"));
        for check in &self.checks {
            out.push_str(&format!("{:<width$}  {:<14}  {}\n", check.id, check.verdict.label(), check.why));
        }
        out.push_str(&format!(
            "\n{} checks: {} hold, {} fall short, {} not applicable\n",
            self.checks.len(),
            self.count(Verdict::Holds),
            self.count(Verdict::FallsShort),
            self.count(Verdict::NotApplicable)
        ));
        out
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "method": self.method,
            "url": self.url,
            "executions_distinguishable": self.distinguishable,
            "passed": self.passed(),
            "holds": self.count(Verdict::Holds),
            "falls_short": self.count(Verdict::FallsShort),
            "not_applicable": self.count(Verdict::NotApplicable),
            "checks": self.checks.iter().map(|c| json!({
                "id": c.id,
                "title": c.title,
                "result": c.verdict.label(),
                "why": c.why,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(verdicts: &[Verdict]) -> Report {
        Report {
            method: "POST".into(),
            url: "https://x/y".into(),
            distinguishable: Some(true),
            checks: verdicts
                .iter()
                .map(|v| CheckResult { id: "replay", title: "t", verdict: *v, why: "because".into() })
                .collect(),
        }
    }

    #[test]
    fn passes_only_when_every_applicable_check_holds() {
        use Verdict::*;
        assert!(report(&[Holds, NotApplicable]).passed());
        assert!(!report(&[Holds, FallsShort]).passed());
        assert!(!report(&[NotApplicable, NotApplicable]).passed(), "nothing checked is no pass");
        assert!(!report(&[]).passed());
        let json = report(&[Holds, FallsShort]).json();
        assert_eq!(json["passed"], false);
        assert_eq!(json["checks"][1]["result"], "falls short");
        assert!(report(&[Holds]).table().contains("replay  holds"));
    }
}
