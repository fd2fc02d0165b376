package session

// What offsetgate does with each api key it forwards, and why. Every key kmsg knows is either
// here or in excluded (versions.go): TestEveryKeyClassified fails when kmsg learns a key this
// table does not classify, so a new api that can write, delete or alter a topic cannot pass
// through unjudged by default.

// apiClass says how offsetgate treats an api key's requests.
type apiClass int

const (
	// judged: the request can write, delete or alter a topic (or offsetgate's own state); its
	// handler decodes it and refuses what would break a mirror's exactness or touch
	// offsetgate's own topics. A request that cannot be decoded closes the connection.
	judged apiClass = iota + 1
	// translated: the request or its answer carries offsets, epochs, addresses or topic ids
	// that offsetgate rewrites (the source view, broker addresses); decoded, and closed when it
	// cannot be.
	translated
	// passed: the request cannot change a topic's records, offsets or configs, or offsetgate's
	// own topics; it passes as bytes and the destination authorizes it.
	passed
)

type apiRule struct {
	class apiClass
	why   string
}

var apiRules = map[int16]apiRule{
	0:  {judged, "Produce: own topics refused; mirror topics only produce-at-offset from approved clients; unknown names and ids refused"},
	1:  {translated, "Fetch: mirror topics served in source terms; unknown ids refused; KIP-951 endpoints rewritten"},
	2:  {translated, "ListOffsets: mirror topics answered in source offsets"},
	3:  {translated, "Metadata: broker addresses, mirror topics' presented epochs"},
	8:  {translated, "OffsetCommit: source offsets stored as the destination's"},
	9:  {translated, "OffsetFetch: destination offsets given back as the source's"},
	10: {translated, "FindCoordinator: coordinator addresses"},
	11: {passed, "JoinGroup: group membership only"},
	12: {passed, "Heartbeat: group membership only"},
	13: {passed, "LeaveGroup: group membership only"},
	14: {passed, "SyncGroup: group membership only"},
	15: {passed, "DescribeGroups: read only"},
	16: {passed, "ListGroups: read only"},
	17: {judged, "SaslHandshake: the identity offsetgate approves by"},
	18: {translated, "ApiVersions: versions intersected with offsetgate's allowlist"},
	19: {judged, "CreateTopics: mirror marks, exactness settings, own topics"},
	20: {judged, "DeleteTopics: own topics refused; mirror topics only by their approved clients; unknown ids refused"},
	21: {judged, "DeleteRecords: own topics refused; mirror topics only by approved clients, in source offsets"},
	22: {passed, "InitProducerId: producer ids only; writes are judged where they land (Produce, AddPartitionsToTxn)"},
	23: {translated, "OffsetForLeaderEpoch: mirror topics answered from the ledger's source epochs"},
	24: {judged, "AddPartitionsToTxn: markers would land on the partitions added; own and mirror topics refused"},
	25: {passed, "AddOffsetsToTxn: adds the group's __consumer_offsets partition only"},
	26: {passed, "EndTxn: markers land only on partitions added, which were judged"},
	28: {translated, "TxnOffsetCommit: source offsets stored as the destination's"},
	29: {passed, "DescribeAcls: read only"},
	30: {passed, "CreateAcls: the destination's authorization; offsetgate's own rules do not depend on it"},
	31: {passed, "DeleteAcls: the destination's authorization; offsetgate's own rules do not depend on it"},
	32: {translated, "DescribeConfigs: offsetgate's own keys shown for mirror topics"},
	33: {judged, "AlterConfigs: replaces a topic's whole config; the resulting config is judged"},
	34: {passed, "AlterReplicaLogDirs: moves replica data between disks; records and offsets are kept"},
	35: {passed, "DescribeLogDirs: read only"},
	36: {judged, "SaslAuthenticate: the identity offsetgate approves by"},
	37: {judged, "CreatePartitions: refused for mirror and own topics"},
	38: {passed, "CreateDelegationToken: the destination's authentication"},
	39: {passed, "RenewDelegationToken: the destination's authentication"},
	40: {passed, "ExpireDelegationToken: the destination's authentication"},
	41: {passed, "DescribeDelegationToken: read only"},
	42: {passed, "DeleteGroups: group state only"},
	43: {judged, "ElectLeaders: unclean elections of mirror and own partitions refused (they lose records)"},
	44: {judged, "IncrementalAlterConfigs: marks, promotion, exactness settings, own topics"},
	45: {passed, "AlterPartitionReassignments: moves replicas; the new replicas copy every record at its offset"},
	46: {passed, "ListPartitionReassignments: read only"},
	47: {passed, "OffsetDelete: group state only"},
	48: {passed, "DescribeClientQuotas: read only"},
	49: {passed, "AlterClientQuotas: throughput limits only"},
	50: {passed, "DescribeUserScramCredentials: read only"},
	51: {passed, "AlterUserScramCredentials: the destination's authentication (needs cluster ALTER there)"},
	57: {passed, "UpdateFeatures: cluster feature levels (needs cluster ALTER on the destination)"},
	60: {translated, "DescribeCluster: broker addresses"},
	61: {passed, "DescribeProducers: read only"},
	64: {passed, "UnregisterBroker: cluster membership (needs cluster ALTER on the destination)"},
	65: {passed, "DescribeTransactions: read only"},
	66: {passed, "ListTransactions: read only"},
	68: {passed, "ConsumerGroupHeartbeat: group membership only"},
	69: {passed, "ConsumerGroupDescribe: read only"},
	71: {passed, "GetTelemetrySubscriptions: client telemetry"},
	72: {passed, "PushTelemetry: client telemetry"},
	74: {passed, "ListConfigResources: read only"},
	75: {translated, "DescribeTopicPartitions: mirror topics' presented epochs"},
	76: {passed, "ShareGroupHeartbeat: group membership only"},
	77: {passed, "ShareGroupDescribe: read only"},
	78: {judged, "ShareFetch: mirror topics refused (share groups bypass the source view); unknown ids refused"},
	79: {translated, "ShareAcknowledge: KIP-951 endpoints; acknowledges only records a ShareFetch served"},
	88: {passed, "StreamsGroupHeartbeat: group membership; internal topics it creates are named after the application"},
	89: {passed, "StreamsGroupDescribe: read only"},
	90: {passed, "DescribeShareGroupOffsets: read only"},
	91: {passed, "AlterShareGroupOffsets: share group state only"},
	92: {passed, "DeleteShareGroupOffsets: share group state only"},
}
