package mirror

// AtOffsetRequest lets the external tests build the requests offsetgate mirror sends.
var AtOffsetRequest = atOffsetRequest
