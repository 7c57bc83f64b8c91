fn main() {
    println!("gridfold: under construction");
}
