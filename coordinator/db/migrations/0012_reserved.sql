-- Reserved: a migration developed alongside 0013 takes this number. This placeholder changes
-- nothing; it is replaced by that migration when both are in (the numbers run without gaps).
SELECT 1;
