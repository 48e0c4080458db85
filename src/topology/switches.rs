//! The switch fabric above the nodes, as Slurm's `topology.conf` describes it
//! (`SwitchName=leaf1 Nodes=node[0-3]`, `SwitchName=spine Switches=leaf[1-2]`): which
//! nodes share a leaf switch, and which uplinks (a switch's link to the switch above it)
//! the traffic between two nodes crosses. The sweep's judgement uses it so that a pair
//! of nodes is compared only with pairs the fabric lets run as fast (see
//! `sweep::analysis`); `launch/sim-cluster --fabric` builds the same file as a tree of
//! bridges.
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One switch: the nodes under it (a leaf) or the switches under it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// SwitchName.
    pub name: String,
    /// Host names directly under this switch (a leaf switch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Switches directly under this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<String>,
}

/// A switch tree, checked: every switch named once, every node under one switch, one
/// parent at most per switch, no cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fabric {
    /// Where it was read from (for messages).
    pub source: String,
    /// Every switch, in the file's order.
    pub switches: Vec<Switch>,
    /// Declared oversubscription of every leaf: its node links' rate over its uplink's
    /// (4 for 4:1). When given, a pair across leaves is judged against the rate the
    /// declared uplinks allow it, so a uniformly slow uplink is seen too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversubscription: Option<f64>,
}

/// Slurm's host list syntax: `node[0-3,7],gpu9`, leading zeros kept (`n[01-10]`).
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in expr.chars() {
        match c {
            '[' => {
                depth += 1;
                cur.push(c)
            }
            ']' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
        if !(0..=1).contains(&depth) {
            bail!("bad host list '{expr}': unbalanced brackets");
        }
    }
    if depth != 0 {
        bail!("bad host list '{expr}': unbalanced brackets");
    }
    items.push(cur);
    let mut out = Vec::new();
    for item in items.iter().filter(|i| !i.is_empty()) {
        let Some(open) = item.find('[') else {
            out.push(item.clone());
            continue;
        };
        let close = item
            .find(']')
            .ok_or_else(|| anyhow!("bad host list '{expr}'"))?;
        let (pre, ranges, post) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        if post.contains('[') {
            bail!("bad host list '{expr}': one bracket range per name");
        }
        for r in ranges.split(',') {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let parse = |s: &str| -> Result<u64> {
                s.parse()
                    .map_err(|_| anyhow!("bad host list '{expr}': '{r}' is not a number or range"))
            };
            let (x, y) = (parse(a)?, parse(b)?);
            if x > y || y - x > 100_000 {
                bail!("bad host list '{expr}': range '{r}'");
            }
            let w = a.len();
            for v in x..=y {
                out.push(format!("{pre}{v:0w$}{post}"));
            }
        }
    }
    Ok(out)
}

/// The file's lines with comments cut and `\`-continued lines joined: (index of the
/// first physical line, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (no, raw) in text.lines().enumerate() {
        let code = raw.split('#').next().unwrap_or("").trim_end();
        let (part, continues) = match code.strip_suffix('\\') {
            Some(p) => (p, true),
            None => (code, false),
        };
        // joined as written, as Slurm's parser does: `Nodes=a,\` then `b` is `Nodes=a,b`
        let (start, mut acc) = open.take().unwrap_or((no, String::new()));
        acc.push_str(part);
        if continues {
            open = Some((start, acc));
        } else {
            out.push((start, acc));
        }
    }
    out.extend(open);
    out
}

impl Fabric {
    /// Parse a Slurm topology.conf (`#` comments, keys case-insensitive, a line ending
    /// in `\` continued on the next as Slurm's parser does; LinkSpeed is read and
    /// ignored, as Slurm does). Errors name `source` and the line a switch starts on.
    pub fn parse(text: &str, source: &str) -> Result<Fabric> {
        let mut switches: Vec<Switch> = Vec::new();
        for (no, joined) in logical_lines(text) {
            let at = format!("{source}:{}", no + 1);
            let line = joined.trim();
            if line.is_empty() {
                continue;
            }
            let mut sw = Switch {
                name: String::new(),
                nodes: vec![],
                switches: vec![],
            };
            for kv in line.split_whitespace() {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| anyhow!("{at}: '{kv}' is not KEY=VALUE"))?;
                match k.to_ascii_lowercase().as_str() {
                    "switchname" => sw.name = v.to_string(),
                    "nodes" => sw.nodes = expand_hostlist(v).map_err(|e| anyhow!("{at}: {e}"))?,
                    "switches" => {
                        sw.switches = expand_hostlist(v).map_err(|e| anyhow!("{at}: {e}"))?
                    }
                    "linkspeed" => {}
                    _ => bail!(
                        "{at}: unknown key '{k}' (topology.conf keys: SwitchName, Nodes, Switches, LinkSpeed)"
                    ),
                }
            }
            if sw.name.is_empty() {
                bail!("{at}: a line without SwitchName=");
            }
            if sw.nodes.is_empty() && sw.switches.is_empty() {
                bail!("{at}: switch {} has neither Nodes= nor Switches=", sw.name);
            }
            if switches.iter().any(|s| s.name == sw.name) {
                bail!("{at}: switch {} is named twice", sw.name);
            }
            switches.push(sw);
        }
        let f = Fabric {
            source: source.to_string(),
            switches,
            oversubscription: None,
        };
        f.check()?;
        Ok(f)
    }

    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Fabric> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("--fabric: cannot read {}: {e}", path.display()))?;
        Fabric::parse(&text, &path.display().to_string())
    }

    fn check(&self) -> Result<()> {
        let src = &self.source;
        if self.switches.is_empty() {
            bail!("{src}: no switch (SwitchName=... Nodes=...)");
        }
        let mut node_at: BTreeMap<&str, &str> = BTreeMap::new();
        for s in &self.switches {
            for n in &s.nodes {
                if let Some(other) = node_at.insert(n, &s.name) {
                    bail!("{src}: node {n} is under both {other} and {}", s.name);
                }
            }
            for c in &s.switches {
                if !self.switches.iter().any(|x| &x.name == c) {
                    bail!("{src}: switch {} names an unknown switch {c}", s.name);
                }
            }
        }
        for s in &self.switches {
            let parents: Vec<&str> = self
                .switches
                .iter()
                .filter(|p| p.switches.contains(&s.name))
                .map(|p| p.name.as_str())
                .collect();
            if parents.len() > 1 {
                bail!(
                    "{src}: switch {} is under {} (one parent per switch: a tree)",
                    s.name,
                    parents.join(" and ")
                );
            }
        }
        for i in 0..self.switches.len() {
            let mut seen = vec![i];
            let mut at = i;
            while let Some(p) = self.parent(at) {
                if seen.contains(&p) {
                    bail!(
                        "{src}: switch {} is its own ancestor",
                        self.switches[i].name
                    );
                }
                seen.push(p);
                at = p;
            }
        }
        if let Some(r) = self.oversubscription {
            if !(r.is_finite() && r > 0.0) {
                bail!("{src}: oversubscription {r} must be a positive number");
            }
        }
        Ok(())
    }

    fn parent(&self, i: usize) -> Option<usize> {
        let name = &self.switches[i].name;
        self.switches.iter().position(|p| p.switches.contains(name))
    }

    /// The switch a host hangs from, by index.
    /// A host matches a name of the file as written or by its short name (the part
    /// before the first dot), as Slurm's node names usually are.
    pub fn leaf_of(&self, host: &str) -> Option<usize> {
        let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
        self.switches
            .iter()
            .position(|s| s.nodes.iter().any(|n| n == host))
            .or_else(|| {
                self.switches
                    .iter()
                    .position(|s| s.nodes.iter().any(|n| short(n) == short(host)))
            })
    }

    /// The leaf's name.
    pub fn name(&self, switch: usize) -> &str {
        &self.switches[switch].name
    }

    /// Hosts of `hosts` that the fabric does not place.
    pub fn unplaced<'a>(&self, hosts: &'a [String]) -> Vec<&'a str> {
        hosts
            .iter()
            .filter(|h| self.leaf_of(h).is_none())
            .map(|h| h.as_str())
            .collect()
    }

    /// The uplinks (by the index of the switch below each) that traffic between the
    /// hosts' leaves crosses: from each leaf up to their lowest common switch. Empty
    /// when both hang from one switch; None when a host is not placed or the two have
    /// no common switch.
    pub fn path(&self, a: &str, b: &str) -> Option<Vec<usize>> {
        let (la, lb) = (self.leaf_of(a)?, self.leaf_of(b)?);
        let up = |mut s: usize| {
            let mut v = vec![s];
            while let Some(p) = self.parent(s) {
                v.push(p);
                s = p;
            }
            v
        };
        let (ua, ub) = (up(la), up(lb));
        let common = ua.iter().position(|s| ub.contains(s))?;
        let meet = ua[common];
        let mut uplinks: Vec<usize> = ua[..common].to_vec();
        uplinks.extend(ub.iter().take_while(|&&s| s != meet));
        Some(uplinks)
    }

    /// Hosts under switch `s` (its own, and those of the switches under it).
    pub fn hosts_under(&self, s: usize) -> Vec<String> {
        let mut v = self.switches[s].nodes.clone();
        for c in &self.switches[s].switches {
            if let Some(ci) = self.switches.iter().position(|x| &x.name == c) {
                v.extend(self.hosts_under(ci));
            }
        }
        v
    }

    /// The name of the switch above `s` ("?" at the top).
    pub fn parent_name(&self, s: usize) -> &str {
        self.parent(s).map(|p| self.name(p)).unwrap_or("?")
    }

    /// "leaf2↔spine": the uplink of switch `s`.
    pub fn uplink_name(&self, s: usize) -> String {
        format!("{}↔{}", self.name(s), self.parent_name(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_as_slurm_writes_them() {
        assert_eq!(
            expand_hostlist("node[0-2,5],gpu9").unwrap(),
            vec!["node0", "node1", "node2", "node5", "gpu9"]
        );
        assert_eq!(
            expand_hostlist("n[08-10]").unwrap(),
            vec!["n08", "n09", "n10"]
        );
        assert_eq!(
            expand_hostlist("leaf[1-2]").unwrap(),
            vec!["leaf1", "leaf2"]
        );
        for bad in ["node[1-x]", "node[3-1]", "node[1", "node]1["] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }

    const TWO_LEVEL: &str = "# two leaves\nSwitchName=leaf1 Nodes=node[0,2,4,6] LinkSpeed=100\n\
        switchname=leaf2 nodes=node[1,3,5,7]\nSwitchName=spine Switches=leaf[1-2]\n";

    #[test]
    fn a_two_level_tree_places_hosts_and_paths() {
        let f = Fabric::parse(TWO_LEVEL, "t.conf").unwrap();
        assert_eq!(f.leaf_of("node4"), Some(0));
        assert_eq!(f.leaf_of("node5"), Some(1));
        assert_eq!(f.path("node0", "node2"), Some(vec![]));
        assert_eq!(f.path("node0", "node1"), Some(vec![0, 1]));
        assert_eq!(f.uplink_name(1), "leaf2↔spine");
        assert_eq!(f.path("node0", "nodeX"), None);
    }

    #[test]
    fn three_levels_cross_only_the_uplinks_below_the_common_switch() {
        let text = "SwitchName=l1 Nodes=a,b\nSwitchName=l2 Nodes=c\nSwitchName=l3 Nodes=d\n\
            SwitchName=s1 Switches=l1,l2\nSwitchName=s2 Switches=l3\nSwitchName=core Switches=s1,s2\n";
        let f = Fabric::parse(text, "t").unwrap();
        let names = |v: Vec<usize>| {
            v.into_iter()
                .map(|s| f.name(s).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(f.path("a", "c").unwrap()), vec!["l1", "l2"]);
        assert_eq!(
            names(f.path("a", "d").unwrap()),
            vec!["l1", "s1", "l3", "s2"]
        );
        assert_eq!(f.hosts_under(3), vec!["a", "b", "c"]);
    }

    #[test]
    fn continued_lines_are_one_switch_and_errors_name_its_first_line() {
        let f = Fabric::parse(
            "# racks\nSwitchName=leaf1 \\\n  Nodes=gpu[01-02],\\\ngpu07 # rack 1\n\
             SwitchName=top Switches=leaf1\n",
            "t.conf",
        )
        .unwrap();
        assert_eq!(f.switches[0].nodes, ["gpu01", "gpu02", "gpu07"]);
        assert_eq!(f.switches[1].switches, ["leaf1"]);
        let e = Fabric::parse("\nSwitchName=a \\\n Nodes=n[1-\n", "t.conf").unwrap_err();
        assert!(format!("{e:#}").contains("t.conf:2"), "{e:#}");
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, want) in [
            (
                "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n1\n",
                "node n1 is under both a and b",
            ),
            (
                "SwitchName=a Nodes=n1 Speed=3\n",
                "t:1: unknown key 'Speed'",
            ),
            (
                "SwitchName=a Nodes=n1\nNodes=n2\n",
                "t:2: a line without SwitchName",
            ),
            ("SwitchName=s Switches=x\n", "unknown switch x"),
            ("SwitchName=a Nodes=n[1-\n", "t:1: bad host list"),
            (
                "SwitchName=a Switches=b\nSwitchName=b Switches=a\n",
                "its own ancestor",
            ),
            ("# nothing\n", "no switch"),
        ] {
            let e = format!("{:#}", Fabric::parse(text, "t").unwrap_err());
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
