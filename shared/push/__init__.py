"""Push notifications: the push store contract, the webhook HTTP client and the signed tokens."""
