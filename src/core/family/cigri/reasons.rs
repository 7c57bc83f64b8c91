//! CiGri's own reasons, nested in the shared ones so that nothing outside
//! the folder names them: the rules of its filter that keep an engine from a
//! task (`Unfit::Family`) and the problems of its orders read back
//! (`OrderProblem::Family`). Their names are the rule and kind names `why`
//! and `gridfold rejections` print.

/// A rule of CiGri's filter that keeps an engine from a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CigriUnfit {
    /// A test campaign already ran a task on the engine's cluster (or this
    /// task is tied to another cluster, where it first went).
    TestClusterDone,
    /// The engine's cluster has an affinity campaign (of a user with
    /// affinity for it) waiting, which comes first there.
    AffinityFirst,
    /// The campaign flagged the engine, or its cluster, a sink (its tasks
    /// "succeed" in a tiny fraction of the campaign's median).
    Sink,
}

impl CigriUnfit {
    pub fn rule_name(self) -> &'static str {
        match self {
            CigriUnfit::TestClusterDone => "cigri-test-cluster-done",
            CigriUnfit::AffinityFirst => "cigri-affinity-first",
            CigriUnfit::Sink => "cigri-sink",
        }
    }
}

/// Why one of CiGri's orders did not apply when read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CigriOrderProblem {
    /// An `EndTestCampaign` of a job that is not an active test campaign
    /// whose tested tasks have all ended.
    TestCampaignNotDone,
    /// A `FlagSink` whose target the sink rule does not hold for now (or
    /// already flagged, or not an active campaign under `cigri`).
    NotASink,
}

impl CigriOrderProblem {
    pub fn kind_name(self) -> &'static str {
        match self {
            CigriOrderProblem::TestCampaignNotDone => "test-campaign-not-done",
            CigriOrderProblem::NotASink => "not-a-sink",
        }
    }
}
