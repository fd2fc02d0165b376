package session

// Source connections: a client connection whose upstream is a broker of the source cluster (a
// listener with `upstream: source`; see docs/operations.md, "Source mode").
//
// Clients of such a listener see both clusters through one address, so the node ids of the
// two must not meet: every source broker is presented with its node id raised by
// Config.NodeShift, at the listener port of that raised id. Every node id a request names is
// lowered before it goes to the source, every node id an answer names is raised, and every
// address is replaced by a listener's. Which api keys carry node ids is an explicit table
// (sourceNodes) that TestSourceNodesComplete keeps complete against kmsg's structs, so a
// field kmsg learns cannot carry an unshifted id to a client.
//
// Nothing else changes on a source connection: the mirror rules judge the destination only,
// so requests pass to the source as a direct client's would, and the source authorizes them.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// nodeUse says whether an api key's request or answer names brokers.
type nodeUse int

const (
	// noNodes: neither the request nor the answer names a broker.
	noNodes nodeUse = iota + 1
	// nodesShifted: node ids (and addresses) in the request or the answer are translated.
	nodesShifted
	// clientReplica: the only node id is the request's replica id, which a client sets to -1
	// (a follower's fetch); anything else is refused on a source connection.
	clientReplica
)

// sourceNodes classifies every api key offsetgate forwards (apiRules) for source connections.
var sourceNodes = map[kmsg.Key]nodeUse{
	kmsg.Produce:                      nodesShifted, // KIP-951 current leader and endpoints
	kmsg.Fetch:                        nodesShifted, // preferred read replica, current leader, endpoints; replica id
	kmsg.ListOffsets:                  clientReplica,
	kmsg.Metadata:                     nodesShifted,
	kmsg.OffsetCommit:                 noNodes,
	kmsg.OffsetFetch:                  noNodes,
	kmsg.FindCoordinator:              nodesShifted,
	kmsg.JoinGroup:                    noNodes, // its "leader" is a member id
	kmsg.Heartbeat:                    noNodes,
	kmsg.LeaveGroup:                   noNodes,
	kmsg.SyncGroup:                    noNodes,
	kmsg.DescribeGroups:               noNodes,
	kmsg.ListGroups:                   noNodes,
	kmsg.SASLHandshake:                noNodes,
	kmsg.ApiVersions:                  nodesShifted, // v5+: the node the client believes it reached
	kmsg.CreateTopics:                 nodesShifted, // manual replica assignments
	kmsg.DeleteTopics:                 noNodes,
	kmsg.DeleteRecords:                noNodes,
	kmsg.InitProducerID:               noNodes,
	kmsg.OffsetForLeaderEpoch:         clientReplica,
	kmsg.AddPartitionsToTxn:           noNodes,
	kmsg.AddOffsetsToTxn:              noNodes,
	kmsg.EndTxn:                       noNodes,
	kmsg.TxnOffsetCommit:              noNodes,
	kmsg.DescribeACLs:                 noNodes,
	kmsg.CreateACLs:                   noNodes,
	kmsg.DeleteACLs:                   noNodes,
	kmsg.DescribeConfigs:              nodesShifted, // broker resources are named by node id
	kmsg.AlterConfigs:                 nodesShifted,
	kmsg.AlterReplicaLogDirs:          noNodes,
	kmsg.DescribeLogDirs:              noNodes,
	kmsg.SASLAuthenticate:             noNodes,
	kmsg.CreatePartitions:             nodesShifted, // manual replica assignments
	kmsg.CreateDelegationToken:        noNodes,
	kmsg.RenewDelegationToken:         noNodes,
	kmsg.ExpireDelegationToken:        noNodes,
	kmsg.DescribeDelegationToken:      noNodes,
	kmsg.DeleteGroups:                 noNodes,
	kmsg.ElectLeaders:                 noNodes,
	kmsg.IncrementalAlterConfigs:      nodesShifted,
	kmsg.AlterPartitionAssignments:    nodesShifted,
	kmsg.ListPartitionReassignments:   nodesShifted,
	kmsg.OffsetDelete:                 noNodes,
	kmsg.DescribeClientQuotas:         noNodes,
	kmsg.AlterClientQuotas:            noNodes,
	kmsg.DescribeUserSCRAMCredentials: noNodes,
	kmsg.AlterUserSCRAMCredentials:    noNodes,
	kmsg.UpdateFeatures:               noNodes,
	kmsg.DescribeCluster:              nodesShifted,
	kmsg.DescribeProducers:            noNodes,
	kmsg.UnregisterBroker:             nodesShifted,
	kmsg.DescribeTransactions:         noNodes,
	kmsg.ListTransactions:             noNodes,
	kmsg.ConsumerGroupHeartbeat:       noNodes,
	kmsg.ConsumerGroupDescribe:        noNodes,
	kmsg.GetTelemetrySubscriptions:    noNodes,
	kmsg.PushTelemetry:                noNodes,
	kmsg.ListConfigResources:          noNodes,
	kmsg.DescribeTopicPartitions:      nodesShifted,
	kmsg.ShareGroupHeartbeat:          noNodes,
	kmsg.ShareGroupDescribe:           noNodes,
	kmsg.ShareFetch:                   nodesShifted,
	kmsg.ShareAcknowledge:             nodesShifted,
	kmsg.StreamsGroupHeartbeat:        noNodes,
	kmsg.StreamsGroupDescribe:         noNodes,
	kmsg.DescribeShareGroupOffsets:    noNodes,
	kmsg.AlterShareGroupOffsets:       noNodes,
	kmsg.DeleteShareGroupOffsets:      noNodes,
}

// Kafka's config resource types that are named by a broker's node id.
const (
	resourceBroker       = 4
	resourceBrokerLogger = 8
)

// fromSource prepares a request on a source connection: node ids it names are lowered (the
// frame is rebuilt), and its answer's node ids and addresses are translated.
func (s *Session) fromSource(r *request) error {
	if s.cfg.Moves != nil && s.cfg.Moves.HasSwitching() {
		// Promoted topics' partitions are the destination's (promoted.go).
		var decided bool
		var err error
		switch kmsg.Key(r.h.key) {
		case kmsg.Produce:
			decided, err = s.sourceProduce(r)
		case kmsg.Fetch:
			decided, err = s.sourceFetch(r)
		case kmsg.ListOffsets:
			decided, err = s.sourceListOffsets(r)
		case kmsg.OffsetForLeaderEpoch:
			decided, err = s.sourceOffsetForLeaderEpoch(r)
		case kmsg.DescribeProducers:
			decided, err = s.sourceDescribeProducers(r)
		}
		if decided || err != nil {
			return err
		}
	}
	if s.cfg.Moves != nil && s.cfg.Moves.HasMoves() {
		if decided, err := s.moveGate(r); decided || err != nil {
			return err
		}
	}
	return s.sourcePass(r)
}

// sourcePass prepares a request that goes to the source: node ids it names are lowered, and its
// answer's node ids and addresses are raised.
func (s *Session) sourcePass(r *request) error {
	use, ok := sourceNodes[kmsg.Key(r.h.key)]
	if !ok {
		return fmt.Errorf("%w: api key %d is not classified for source connections", ErrForbidden, r.h.key)
	}
	if use == noNodes {
		return nil
	}
	req := kmsg.RequestForKey(r.h.key)
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(r.body); err != nil {
		return fmt.Errorf("%w: api key %d v%d on a source connection: %v", ErrUndecodable, r.h.key, r.h.version, err)
	}
	changed, err := s.lowerRequest(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrForbidden, s.ident, err)
	}
	if changed {
		r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	}
	if rw := sourceAnswer(kmsg.Key(r.h.key)); rw != nil {
		r.onResp = rw
	}
	return nil
}

// lower turns a presented source node id back into the source's own.
func (s *Session) lower(id int32) (int32, error) {
	if id < 0 {
		return id, nil
	}
	if id < s.cfg.NodeShift {
		return 0, fmt.Errorf("node id %d is not a source broker as presented here (source brokers are %d and up)", id, s.cfg.NodeShift)
	}
	return id - s.cfg.NodeShift, nil
}

func (s *Session) lowerAll(ids []int32) error {
	for i, id := range ids {
		n, err := s.lower(id)
		if err != nil {
			return err
		}
		ids[i] = n
	}
	return nil
}

// lowerName lowers a broker resource's name (a node id; empty: the cluster-wide default).
func (s *Session) lowerName(typ int8, name *string) (bool, error) {
	if (typ != resourceBroker && typ != resourceBrokerLogger) || *name == "" {
		return false, nil
	}
	id, err := strconv.ParseInt(*name, 10, 32)
	if err != nil {
		return false, fmt.Errorf("broker resource %q is not a node id", *name)
	}
	n, err := s.lower(int32(id))
	if err != nil {
		return false, err
	}
	*name = strconv.Itoa(int(n))
	return true, nil
}

// raiseName is lowerName's inverse, for answers.
func (s *Session) raiseName(typ int8, name *string) {
	if (typ != resourceBroker && typ != resourceBrokerLogger) || *name == "" {
		return
	}
	if id, err := strconv.ParseInt(*name, 10, 32); err == nil && id >= 0 {
		*name = strconv.Itoa(int(int32(id) + s.cfg.NodeShift))
	}
}

func noReplica(id int32) error {
	if id >= 0 {
		return fmt.Errorf("replica id %d: a follower's request is not taken from clients", id)
	}
	return nil
}

// lowerRequest lowers the node ids a request names; it reports whether it changed any.
func (s *Session) lowerRequest(req kmsg.Request) (changed bool, err error) {
	switch req := req.(type) {
	case *kmsg.FetchRequest:
		if err := noReplica(req.ReplicaID); err != nil {
			return false, err
		}
		if err := noReplica(req.ReplicaState.ID); err != nil {
			return false, err
		}
		if limit := int32(s.cfg.SourceFetchWait / time.Millisecond); limit > 0 && req.MaxWaitMillis > limit {
			req.MaxWaitMillis = limit
			return true, nil
		}
		return false, nil
	case *kmsg.ApiVersionsRequest:
		if req.NodeID < 0 {
			return false, nil
		}
		req.NodeID, err = s.lower(req.NodeID)
		return err == nil, err
	case *kmsg.ListOffsetsRequest:
		return false, noReplica(req.ReplicaID)
	case *kmsg.OffsetForLeaderEpochRequest:
		return false, noReplica(req.ReplicaID)
	case *kmsg.CreateTopicsRequest:
		for i := range req.Topics {
			for j := range req.Topics[i].ReplicaAssignment {
				if err := s.lowerAll(req.Topics[i].ReplicaAssignment[j].Replicas); err != nil {
					return false, err
				}
				changed = true
			}
		}
	case *kmsg.CreatePartitionsRequest:
		for i := range req.Topics {
			for j := range req.Topics[i].Assignment {
				if err := s.lowerAll(req.Topics[i].Assignment[j].Replicas); err != nil {
					return false, err
				}
				changed = true
			}
		}
	case *kmsg.AlterPartitionAssignmentsRequest:
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				if err := s.lowerAll(req.Topics[i].Partitions[j].Replicas); err != nil {
					return false, err
				}
				changed = true
			}
		}
	case *kmsg.UnregisterBrokerRequest:
		if req.BrokerID, err = s.lower(req.BrokerID); err != nil {
			return false, err
		}
		changed = true
	case *kmsg.DescribeConfigsRequest:
		for i := range req.Resources {
			c, err := s.lowerName(int8(req.Resources[i].ResourceType), &req.Resources[i].ResourceName)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	case *kmsg.AlterConfigsRequest:
		for i := range req.Resources {
			c, err := s.lowerName(int8(req.Resources[i].ResourceType), &req.Resources[i].ResourceName)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	case *kmsg.IncrementalAlterConfigsRequest:
		for i := range req.Resources {
			c, err := s.lowerName(int8(req.Resources[i].ResourceType), &req.Resources[i].ResourceName)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	}
	return changed, nil
}

// sourceAnswer is the rewrite of a source connection's answers of an api key; nil: none.
func sourceAnswer(k kmsg.Key) rewriteFunc {
	switch k {
	case kmsg.Metadata, kmsg.FindCoordinator, kmsg.DescribeCluster, kmsg.DescribeTopicPartitions,
		kmsg.Produce, kmsg.Fetch, kmsg.ShareFetch, kmsg.ShareAcknowledge,
		kmsg.DescribeConfigs, kmsg.AlterConfigs, kmsg.IncrementalAlterConfigs, kmsg.ListPartitionReassignments:
		return func(s *Session, version int16, body []byte) ([]byte, bool, error) {
			resp := kmsg.ResponseForKey(int16(k))
			resp.SetVersion(version)
			if err := resp.ReadFrom(body); err != nil {
				return nil, false, err
			}
			if !s.raiseAnswer(resp) {
				return nil, false, nil
			}
			return resp.AppendTo(nil), true, nil
		}
	}
	return nil
}

// raise gives a source node id as clients see it.
func (s *Session) raise(id *int32) {
	if *id >= 0 {
		*id += s.cfg.NodeShift
	}
}

func (s *Session) raiseAll(ids []int32) {
	for i := range ids {
		s.raise(&ids[i])
	}
}

// broker raises a node id and replaces its address with the listener's.
func (s *Session) broker(id *int32, host *string, port *int32) {
	if *id < 0 {
		return
	}
	s.endpoint(*id, host, port)
	s.raise(id)
}

// raiseAnswer raises the node ids of an answer and replaces its addresses; it reports whether
// anything changed (an answer without node ids goes as it came).
func (s *Session) raiseAnswer(resp kmsg.Response) bool {
	changed := false
	leader := func(id *int32) {
		if *id >= 0 {
			s.raise(id)
			changed = true
		}
	}
	switch resp := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			s.broker(&b.NodeID, &b.Host, &b.Port)
		}
		s.raise(&resp.ControllerID)
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				s.raise(&p.Leader)
				s.raiseAll(p.Replicas)
				s.raiseAll(p.ISR)
				s.raiseAll(p.OfflineReplicas)
			}
		}
		return true
	case *kmsg.FindCoordinatorResponse:
		if resp.Host != "" {
			s.broker(&resp.NodeID, &resp.Host, &resp.Port)
		}
		for i := range resp.Coordinators {
			c := &resp.Coordinators[i]
			if c.Host != "" {
				s.broker(&c.NodeID, &c.Host, &c.Port)
			}
		}
		return true
	case *kmsg.DescribeClusterResponse:
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			s.broker(&b.NodeID, &b.Host, &b.Port)
		}
		s.raise(&resp.ControllerID)
		return true
	case *kmsg.DescribeTopicPartitionsResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				s.raise(&p.LeaderID)
				s.raiseAll(p.Replicas)
				s.raiseAll(p.ISR)
				s.raiseAll(p.EligibleLeaderReplicas)
				s.raiseAll(p.LastKnownELR)
				s.raiseAll(p.OfflineReplicas)
			}
		}
		return true
	case *kmsg.ProduceResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				leader(&resp.Topics[i].Partitions[j].CurrentLeader.LeaderID)
			}
		}
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			s.broker(&b.NodeID, &b.Host, &b.Port)
			changed = true
		}
	case *kmsg.FetchResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				leader(&p.CurrentLeader.LeaderID)
				leader(&p.PreferredReadReplica)
			}
		}
		for i := range resp.Brokers {
			b := &resp.Brokers[i]
			s.broker(&b.NodeID, &b.Host, &b.Port)
			changed = true
		}
	case *kmsg.ShareFetchResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				leader(&resp.Topics[i].Partitions[j].CurrentLeader.LeaderID)
			}
		}
		for i := range resp.NodeEndpoints {
			e := &resp.NodeEndpoints[i]
			s.broker(&e.NodeID, &e.Host, &e.Port)
			changed = true
		}
	case *kmsg.ShareAcknowledgeResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				leader(&resp.Topics[i].Partitions[j].CurrentLeader.LeaderID)
			}
		}
		for i := range resp.NodeEndpoints {
			e := &resp.NodeEndpoints[i]
			s.broker(&e.NodeID, &e.Host, &e.Port)
			changed = true
		}
	case *kmsg.DescribeConfigsResponse:
		for i := range resp.Resources {
			s.raiseName(int8(resp.Resources[i].ResourceType), &resp.Resources[i].ResourceName)
		}
		return true
	case *kmsg.AlterConfigsResponse:
		for i := range resp.Resources {
			s.raiseName(int8(resp.Resources[i].ResourceType), &resp.Resources[i].ResourceName)
		}
		return true
	case *kmsg.IncrementalAlterConfigsResponse:
		for i := range resp.Resources {
			s.raiseName(int8(resp.Resources[i].ResourceType), &resp.Resources[i].ResourceName)
		}
		return true
	case *kmsg.ListPartitionReassignmentsResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				s.raiseAll(p.Replicas)
				s.raiseAll(p.AddingReplicas)
				s.raiseAll(p.RemovingReplicas)
			}
		}
		return true
	}
	return changed
}
