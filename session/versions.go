package session

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

var allowed = map[int16]apiRange{
	0:  {0, 13}, // Produce
	1:  {0, 18}, // Fetch
	2:  {0, 11}, // ListOffsets
	3:  {0, 13}, // Metadata
	8:  {0, 10}, // OffsetCommit
	9:  {0, 10}, // OffsetFetch
	10: {0, 6},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 6},  // DescribeGroups
	16: {0, 5},  // ListGroups
	// SaslHandshake v0 sends the SASL tokens as bare frames without Kafka headers; until the
	// identity work handles them, only v1 (tokens in SaslAuthenticate) is advertised.
	17: {1, 1}, // SaslHandshake
	18: {0, 5}, // ApiVersions
	19: {0, 7}, // CreateTopics
	20: {0, 6}, // DeleteTopics
	21: {0, 2}, // DeleteRecords
	22: {0, 5}, // InitProducerId
	23: {0, 4}, // OffsetForLeaderEpoch
	24: {0, 5}, // AddPartitionsToTxn
	25: {0, 4}, // AddOffsetsToTxn
	26: {0, 5}, // EndTxn
	28: {0, 6}, // TxnOffsetCommit
	29: {0, 3}, // DescribeAcls
	30: {0, 3}, // CreateAcls
	31: {0, 3}, // DeleteAcls
	32: {0, 4}, // DescribeConfigs
	33: {0, 2}, // AlterConfigs
	34: {0, 2}, // AlterReplicaLogDirs
	35: {0, 5}, // DescribeLogDirs
	36: {0, 2}, // SaslAuthenticate
	37: {0, 3}, // CreatePartitions
	38: {0, 3}, // CreateDelegationToken
	39: {0, 2}, // RenewDelegationToken
	40: {0, 2}, // ExpireDelegationToken
	41: {0, 3}, // DescribeDelegationToken
	42: {0, 3}, // DeleteGroups
	43: {0, 2}, // ElectLeaders
	44: {0, 1}, // IncrementalAlterConfigs
	45: {0, 1}, // AlterPartitionAssignments
	46: {0, 0}, // ListPartitionReassignments
	47: {0, 0}, // OffsetDelete
	48: {0, 1}, // DescribeClientQuotas
	49: {0, 1}, // AlterClientQuotas
	50: {0, 0}, // DescribeUserScramCredentials
	51: {0, 0}, // AlterUserScramCredentials
	57: {0, 2}, // UpdateFeatures
	60: {0, 2}, // DescribeCluster
	61: {0, 0}, // DescribeProducers
	64: {0, 0}, // UnregisterBroker
	65: {0, 0}, // DescribeTransactions
	66: {0, 2}, // ListTransactions
	68: {0, 1}, // ConsumerGroupHeartbeat
	69: {0, 1}, // ConsumerGroupDescribe
	71: {0, 0}, // GetTelemetrySubscriptions
	72: {0, 0}, // PushTelemetry
	74: {0, 1}, // ListConfigResources
	75: {0, 0}, // DescribeTopicPartitions
	76: {0, 1}, // ShareGroupHeartbeat
	77: {0, 1}, // ShareGroupDescribe
	78: {0, 2}, // ShareFetch
	79: {0, 2}, // ShareAcknowledge
	88: {0, 1}, // StreamsGroupHeartbeat
	89: {0, 1}, // StreamsGroupDescribe
	90: {0, 1}, // DescribeShareGroupOffsets
	91: {0, 0}, // AlterShareGroupOffsets
	92: {0, 0}, // DeleteShareGroupOffsets
}

// excluded lists the kmsg keys offsetgate deliberately never advertises, with the reason.
var excluded = map[int16]string{
	4:  "LeaderAndIsr: inter-broker",
	5:  "StopReplica: inter-broker",
	6:  "UpdateMetadata: inter-broker",
	7:  "ControlledShutdown: inter-broker",
	27: "WriteTxnMarkers: inter-broker",
	52: "Vote: raft",
	53: "BeginQuorumEpoch: raft",
	54: "EndQuorumEpoch: raft",
	55: "DescribeQuorum: carries controller listener addresses offsetgate does not rewrite",
	56: "AlterPartition: inter-broker",
	58: "Envelope: inter-broker",
	59: "FetchSnapshot: raft",
	62: "BrokerRegistration: controller",
	63: "BrokerHeartbeat: controller",
	67: "AllocateProducerIds: controller",
	70: "ControllerRegistration: controller, carries listener addresses",
	73: "AssignReplicasToDirs: controller",
	80: "AddRaftVoter: carries listener addresses",
	81: "RemoveRaftVoter: raft",
	82: "UpdateRaftVoter: carries listener addresses",
	83: "InitializeShareGroupState: share coordinator internal",
	84: "ReadShareGroupState: share coordinator internal",
	85: "WriteShareGroupState: share coordinator internal",
	86: "DeleteShareGroupState: share coordinator internal",
	87: "ReadShareGroupStateSummary: share coordinator internal",
	93: "StreamsGroupTopologyDescriptionUpdate: not yet released by brokers",
	94: "UnregisterController: controller",
}

// Supported reports whether offsetgate parses and forwards this key and version.
func Supported(key, version int16) bool {
	r, ok := allowed[key]
	return ok && version >= r.min && version <= r.max
}

// Allowed returns offsetgate's own range for a key.
func Allowed(key int16) (min, max int16, ok bool) {
	r, ok := allowed[key]
	return r.min, r.max, ok
}
