package session

import "github.com/twmb/franz-go/pkg/kmsg"

// The versions offsetgate can parse and therefore advertises (intersected with what the
// destination supports). The table is explicit and tied to the kmsg version in go.mod:
// TestAllowlistMatchesKmsg fails when kmsg learns versions or keys this table does not list,
// so a kmsg upgrade cannot silently widen what offsetgate claims to handle.
//
// Keys left out are either inter-broker/controller APIs (never sent by clients to a broker
// listener) or carry addresses offsetgate does not rewrite (DescribeQuorum's and the raft
// voter APIs' listeners); clients never learn they exist through offsetgate.

// apiRange is the inclusive version range offsetgate accepts for one api key.
type apiRange struct{ min, max int16 }

// kmsgVersion is the kmsg release the table below was written against.
const kmsgVersion = "v1.15.1"

var allowed = map[kmsg.Key]apiRange{
	kmsg.Produce:         {0, 13},
	kmsg.Fetch:           {0, 18},
	kmsg.ListOffsets:     {0, 11},
	kmsg.Metadata:        {0, 13},
	kmsg.OffsetCommit:    {0, 10},
	kmsg.OffsetFetch:     {0, 10},
	kmsg.FindCoordinator: {0, 6},
	kmsg.JoinGroup:       {0, 9},
	kmsg.Heartbeat:       {0, 4},
	kmsg.LeaveGroup:      {0, 5},
	kmsg.SyncGroup:       {0, 5},
	kmsg.DescribeGroups:  {0, 6},
	kmsg.ListGroups:      {0, 5},
	// SaslHandshake v0 sends the SASL tokens as bare frames without Kafka headers; until the
	// identity work handles them, only v1 (tokens in SaslAuthenticate) is advertised.
	kmsg.SASLHandshake:                {1, 1}, // SaslHandshake
	kmsg.ApiVersions:                  {0, 5},
	kmsg.CreateTopics:                 {0, 7},
	kmsg.DeleteTopics:                 {0, 6},
	kmsg.DeleteRecords:                {0, 2},
	kmsg.InitProducerID:               {0, 5}, // InitProducerId
	kmsg.OffsetForLeaderEpoch:         {0, 4},
	kmsg.AddPartitionsToTxn:           {0, 5},
	kmsg.AddOffsetsToTxn:              {0, 4},
	kmsg.EndTxn:                       {0, 5},
	kmsg.TxnOffsetCommit:              {0, 6},
	kmsg.DescribeACLs:                 {0, 3}, // DescribeAcls
	kmsg.CreateACLs:                   {0, 3}, // CreateAcls
	kmsg.DeleteACLs:                   {0, 3}, // DeleteAcls
	kmsg.DescribeConfigs:              {0, 4},
	kmsg.AlterConfigs:                 {0, 2},
	kmsg.AlterReplicaLogDirs:          {0, 2},
	kmsg.DescribeLogDirs:              {0, 5},
	kmsg.SASLAuthenticate:             {0, 2}, // SaslAuthenticate
	kmsg.CreatePartitions:             {0, 3},
	kmsg.CreateDelegationToken:        {0, 3},
	kmsg.RenewDelegationToken:         {0, 2},
	kmsg.ExpireDelegationToken:        {0, 2},
	kmsg.DescribeDelegationToken:      {0, 3},
	kmsg.DeleteGroups:                 {0, 3},
	kmsg.ElectLeaders:                 {0, 2},
	kmsg.IncrementalAlterConfigs:      {0, 1},
	kmsg.AlterPartitionAssignments:    {0, 1},
	kmsg.ListPartitionReassignments:   {0, 0},
	kmsg.OffsetDelete:                 {0, 0},
	kmsg.DescribeClientQuotas:         {0, 1},
	kmsg.AlterClientQuotas:            {0, 1},
	kmsg.DescribeUserSCRAMCredentials: {0, 0}, // DescribeUserScramCredentials
	kmsg.AlterUserSCRAMCredentials:    {0, 0}, // AlterUserScramCredentials
	kmsg.UpdateFeatures:               {0, 2},
	kmsg.DescribeCluster:              {0, 2},
	kmsg.DescribeProducers:            {0, 0},
	kmsg.UnregisterBroker:             {0, 0},
	kmsg.DescribeTransactions:         {0, 0},
	kmsg.ListTransactions:             {0, 2},
	kmsg.ConsumerGroupHeartbeat:       {0, 1},
	kmsg.ConsumerGroupDescribe:        {0, 1},
	kmsg.GetTelemetrySubscriptions:    {0, 0},
	kmsg.PushTelemetry:                {0, 0},
	kmsg.ListConfigResources:          {0, 1},
	kmsg.DescribeTopicPartitions:      {0, 0},
	kmsg.ShareGroupHeartbeat:          {0, 1},
	kmsg.ShareGroupDescribe:           {0, 1},
	kmsg.ShareFetch:                   {0, 2},
	kmsg.ShareAcknowledge:             {0, 2},
	kmsg.StreamsGroupHeartbeat:        {0, 1},
	kmsg.StreamsGroupDescribe:         {0, 1},
	kmsg.DescribeShareGroupOffsets:    {0, 1},
	kmsg.AlterShareGroupOffsets:       {0, 0},
	kmsg.DeleteShareGroupOffsets:      {0, 0},
}

// excluded lists the kmsg keys offsetgate deliberately never advertises, with the reason.
var excluded = map[kmsg.Key]string{
	kmsg.LeaderAndISR:                          "LeaderAndIsr: inter-broker",
	kmsg.StopReplica:                           "StopReplica: inter-broker",
	kmsg.UpdateMetadata:                        "UpdateMetadata: inter-broker",
	kmsg.ControlledShutdown:                    "ControlledShutdown: inter-broker",
	kmsg.WriteTxnMarkers:                       "WriteTxnMarkers: inter-broker",
	kmsg.Vote:                                  "Vote: raft",
	kmsg.BeginQuorumEpoch:                      "BeginQuorumEpoch: raft",
	kmsg.EndQuorumEpoch:                        "EndQuorumEpoch: raft",
	kmsg.DescribeQuorum:                        "DescribeQuorum: carries controller listener addresses offsetgate does not rewrite",
	kmsg.AlterPartition:                        "AlterPartition: inter-broker",
	kmsg.Envelope:                              "Envelope: inter-broker",
	kmsg.FetchSnapshot:                         "FetchSnapshot: raft",
	kmsg.BrokerRegistration:                    "BrokerRegistration: controller",
	kmsg.BrokerHeartbeat:                       "BrokerHeartbeat: controller",
	kmsg.AllocateProducerIDs:                   "AllocateProducerIds: controller",
	kmsg.ControllerRegistration:                "ControllerRegistration: controller, carries listener addresses",
	kmsg.AssignReplicasToDirs:                  "AssignReplicasToDirs: controller",
	kmsg.AddRaftVoter:                          "AddRaftVoter: carries listener addresses",
	kmsg.RemoveRaftVoter:                       "RemoveRaftVoter: raft",
	kmsg.UpdateRaftVoter:                       "UpdateRaftVoter: carries listener addresses",
	kmsg.InitializeShareGroupState:             "InitializeShareGroupState: share coordinator internal",
	kmsg.ReadShareGroupState:                   "ReadShareGroupState: share coordinator internal",
	kmsg.WriteShareGroupState:                  "WriteShareGroupState: share coordinator internal",
	kmsg.DeleteShareGroupState:                 "DeleteShareGroupState: share coordinator internal",
	kmsg.ReadShareGroupStateSummary:            "ReadShareGroupStateSummary: share coordinator internal",
	kmsg.StreamsGroupTopologyDescriptionUpdate: "StreamsGroupTopologyDescriptionUpdate: not yet released by brokers",
	kmsg.UnregisterController:                  "UnregisterController: controller",
}

// Supported reports whether offsetgate parses and forwards this key and version.
func Supported(key, version int16) bool {
	r, ok := allowed[kmsg.Key(key)]
	return ok && version >= r.min && version <= r.max
}

// Allowed returns offsetgate's own range for a key.
func Allowed(key int16) (min, max int16, ok bool) {
	r, ok := allowed[kmsg.Key(key)]
	return r.min, r.max, ok
}
