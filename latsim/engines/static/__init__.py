"""Static batching: a batch is admitted whole and runs until every member finishes."""
