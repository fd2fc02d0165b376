package session

// What offsetgate does with each api key it forwards, and why. Every key kmsg knows is either
// here or in excluded (versions.go): TestEveryKeyClassified fails when kmsg learns a key this
// table does not classify, so a new api that can write, delete or alter a topic cannot pass
// through unjudged by default.

import "github.com/twmb/franz-go/pkg/kmsg"

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

var apiRules = map[kmsg.Key]apiRule{
	kmsg.Produce:                      {judged, "Produce: own topics refused; mirror topics only produce-at-offset from approved clients; unknown names and ids refused"},
	kmsg.Fetch:                        {translated, "Fetch: mirror topics served in source terms; unknown ids refused; KIP-951 endpoints rewritten (on gnet a fetch with nothing else to rewrite goes to D as v15, without them)"},
	kmsg.ListOffsets:                  {translated, "ListOffsets: mirror topics answered in source offsets"},
	kmsg.Metadata:                     {translated, "Metadata: broker addresses, mirror topics' presented epochs"},
	kmsg.OffsetCommit:                 {translated, "OffsetCommit: source offsets stored as the destination's"},
	kmsg.OffsetFetch:                  {translated, "OffsetFetch: destination offsets given back as the source's"},
	kmsg.FindCoordinator:              {translated, "FindCoordinator: coordinator addresses"},
	kmsg.JoinGroup:                    {passed, "JoinGroup: group membership only"},
	kmsg.Heartbeat:                    {passed, "Heartbeat: group membership only"},
	kmsg.LeaveGroup:                   {passed, "LeaveGroup: group membership only"},
	kmsg.SyncGroup:                    {passed, "SyncGroup: group membership only"},
	kmsg.DescribeGroups:               {passed, "DescribeGroups: read only"},
	kmsg.ListGroups:                   {passed, "ListGroups: read only"},
	kmsg.SASLHandshake:                {judged, "SaslHandshake: the identity offsetgate approves by"},
	kmsg.ApiVersions:                  {translated, "ApiVersions: versions intersected with offsetgate's allowlist"},
	kmsg.CreateTopics:                 {judged, "CreateTopics: mirror marks, exactness settings, own topics"},
	kmsg.DeleteTopics:                 {judged, "DeleteTopics: own topics refused; mirror topics only by their approved clients; unknown ids refused"},
	kmsg.DeleteRecords:                {judged, "DeleteRecords: own topics refused; mirror topics only by approved clients, in source offsets"},
	kmsg.InitProducerID:               {judged, "InitProducerId: offsetgate's own transactional ids refused (they would fence its ledger appends); writes are judged where they land (Produce, AddPartitionsToTxn)"},
	kmsg.OffsetForLeaderEpoch:         {translated, "OffsetForLeaderEpoch: mirror topics answered from the ledger's source epochs"},
	kmsg.AddPartitionsToTxn:           {judged, "AddPartitionsToTxn: markers would land on the partitions added; own and mirror topics refused"},
	kmsg.AddOffsetsToTxn:              {judged, "AddOffsetsToTxn: adds the group's __consumer_offsets partition only; offsetgate's own transactional ids refused"},
	kmsg.EndTxn:                       {judged, "EndTxn: markers land only on partitions added, which were judged; offsetgate's own transactional ids refused"},
	kmsg.TxnOffsetCommit:              {translated, "TxnOffsetCommit: source offsets stored as the destination's"},
	kmsg.DescribeACLs:                 {passed, "DescribeAcls: read only"},
	kmsg.CreateACLs:                   {passed, "CreateAcls: the destination's authorization; offsetgate's own rules do not depend on it"},
	kmsg.DeleteACLs:                   {passed, "DeleteAcls: the destination's authorization; offsetgate's own rules do not depend on it"},
	kmsg.DescribeConfigs:              {translated, "DescribeConfigs: offsetgate's own keys shown for mirror topics"},
	kmsg.AlterConfigs:                 {judged, "AlterConfigs: replaces a topic's whole config; the resulting config is judged"},
	kmsg.AlterReplicaLogDirs:          {passed, "AlterReplicaLogDirs: moves replica data between disks; records and offsets are kept"},
	kmsg.DescribeLogDirs:              {passed, "DescribeLogDirs: read only"},
	kmsg.SASLAuthenticate:             {judged, "SaslAuthenticate: the identity offsetgate approves by"},
	kmsg.CreatePartitions:             {judged, "CreatePartitions: refused for own topics, and for mirror topics but from their approved mirroring client"},
	kmsg.CreateDelegationToken:        {passed, "CreateDelegationToken: the destination's authentication"},
	kmsg.RenewDelegationToken:         {passed, "RenewDelegationToken: the destination's authentication"},
	kmsg.ExpireDelegationToken:        {passed, "ExpireDelegationToken: the destination's authentication"},
	kmsg.DescribeDelegationToken:      {passed, "DescribeDelegationToken: read only"},
	kmsg.DeleteGroups:                 {passed, "DeleteGroups: group state only"},
	kmsg.ElectLeaders:                 {judged, "ElectLeaders: unclean elections of mirror and own partitions refused (they lose records)"},
	kmsg.IncrementalAlterConfigs:      {judged, "IncrementalAlterConfigs: marks, promotion, exactness settings, own topics"},
	kmsg.AlterPartitionAssignments:    {passed, "AlterPartitionReassignments: moves replicas; the new replicas copy every record at its offset"},
	kmsg.ListPartitionReassignments:   {passed, "ListPartitionReassignments: read only"},
	kmsg.OffsetDelete:                 {passed, "OffsetDelete: group state only"},
	kmsg.DescribeClientQuotas:         {passed, "DescribeClientQuotas: read only"},
	kmsg.AlterClientQuotas:            {passed, "AlterClientQuotas: throughput limits only"},
	kmsg.DescribeUserSCRAMCredentials: {passed, "DescribeUserScramCredentials: read only"},
	kmsg.AlterUserSCRAMCredentials:    {passed, "AlterUserScramCredentials: the destination's authentication (needs cluster ALTER there)"},
	kmsg.UpdateFeatures:               {passed, "UpdateFeatures: cluster feature levels (needs cluster ALTER on the destination)"},
	kmsg.DescribeCluster:              {translated, "DescribeCluster: broker addresses"},
	kmsg.DescribeProducers:            {translated, "DescribeProducers: mirror partitions answered with the source's producer states, from the source view"},
	kmsg.UnregisterBroker:             {passed, "UnregisterBroker: cluster membership (needs cluster ALTER on the destination)"},
	kmsg.DescribeTransactions:         {translated, "DescribeTransactions: read only; offsetgate's own transactional ids answered refused"},
	kmsg.ListTransactions:             {translated, "ListTransactions: read only; offsetgate's own transactional ids left out"},
	kmsg.ConsumerGroupHeartbeat:       {passed, "ConsumerGroupHeartbeat: group membership only"},
	kmsg.ConsumerGroupDescribe:        {passed, "ConsumerGroupDescribe: read only"},
	kmsg.GetTelemetrySubscriptions:    {passed, "GetTelemetrySubscriptions: client telemetry"},
	kmsg.PushTelemetry:                {passed, "PushTelemetry: client telemetry"},
	kmsg.ListConfigResources:          {passed, "ListConfigResources: read only"},
	kmsg.DescribeTopicPartitions:      {translated, "DescribeTopicPartitions: mirror topics' presented epochs"},
	kmsg.ShareGroupHeartbeat:          {passed, "ShareGroupHeartbeat: group membership only"},
	kmsg.ShareGroupDescribe:           {passed, "ShareGroupDescribe: read only"},
	kmsg.ShareFetch:                   {judged, "ShareFetch: mirror topics refused (share groups bypass the source view); unknown ids refused"},
	kmsg.ShareAcknowledge:             {translated, "ShareAcknowledge: KIP-951 endpoints; acknowledges only records a ShareFetch served"},
	kmsg.StreamsGroupHeartbeat:        {passed, "StreamsGroupHeartbeat: group membership; internal topics it creates are named after the application"},
	kmsg.StreamsGroupDescribe:         {passed, "StreamsGroupDescribe: read only"},
	kmsg.DescribeShareGroupOffsets:    {passed, "DescribeShareGroupOffsets: read only"},
	kmsg.AlterShareGroupOffsets:       {passed, "AlterShareGroupOffsets: share group state only"},
	kmsg.DeleteShareGroupOffsets:      {passed, "DeleteShareGroupOffsets: share group state only"},
}
