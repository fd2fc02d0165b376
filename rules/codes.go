package rules

import "github.com/twmb/franz-go/pkg/kerr"

// The error codes offsetgate answers with itself, in one table, each the Kafka error a client
// already knows how to handle (docs/PROTOCOL.md says when each is answered).
var (
	// Refusals of the rules.
	ErrUnknownTopic       = kerr.UnknownTopicOrPartition.Code            // a name the destination does not show offsetgate
	ErrUnknownTopicID     = kerr.UnknownTopicID.Code                     // an id the destination does not show offsetgate
	ErrTopicAuthorization = kerr.TopicAuthorizationFailed.Code           // not an approved mirroring client, or offsetgate's own topic
	ErrInvalidConfig      = kerr.InvalidConfig.Code                      // a config change that would break exactness, or adding the mark later
	ErrPolicyViolation    = kerr.PolicyViolation.Code                    // an operation that would break a mirror's exactness
	ErrNotAttempted       = kerr.OperationNotAttempted.Code              // the rest of a request refused whole (AddPartitionsToTxn)
	ErrIllegalSASLState   = kerr.IllegalSaslState.Code                   // a SASL step out of order
	ErrTxnIDAuthorization = kerr.TransactionalIDAuthorizationFailed.Code // one of offsetgate's own transactional ids

	// Produce-at-offset answers.
	ErrInvalidRecord  = kerr.InvalidRecord.Code            // a batch this version cannot mirror exactly, or a bad CRC
	ErrOutOfOrder     = kerr.OutOfOrderSequenceNumber.Code // overlaps what is mirrored with different content, or rewinds
	ErrFencedEpoch    = kerr.FencedLeaderEpoch.Code        // a lower source leader epoch than already mirrored
	ErrHalted         = kerr.KafkaStorageError.Code        // the partition is halted (or D holds what offsetgate did not write)
	ErrOwned          = kerr.PolicyViolation.Code          // another offsetgate instance owns the partition
	ErrInvalidRequest = kerr.InvalidRequest.Code           // a from offset on a request of several partitions

	// Waiting on the destination.
	ErrTimedOut           = kerr.RequestTimedOut.Code       // the ledger, a lookup or D did not answer in time: retry
	ErrNotLeader          = kerr.NotLeaderForPartition.Code // a view not loaded yet: the client refreshes and retries
	ErrLeaderNotAvailable = kerr.LeaderNotAvailable.Code    // a view not loaded yet, in Metadata
)
