// The member-files check's fixture: a list that names a scheme outside its files.
const char* const kSchemes[] = {"xl", "alibi"};
