//! Small text helpers shared by the command line and the app's import.

/// Levenshtein distance, by characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn edit_distance_counts_single_character_edits() {
        use super::edit_distance;
        assert_eq!(edit_distance("app", "app"), 0);
        assert_eq!(edit_distance("ap", "app"), 1);
        assert_eq!(edit_distance("aplication", "application"), 1);
        assert_eq!(edit_distance("wsgi", "app"), 4);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
