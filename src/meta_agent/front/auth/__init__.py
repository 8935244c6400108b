"""Who a caller is: OAuth access tokens checked as a resource server, the issuer's keys, and the subject they make."""
